package chaos

import (
	"strings"
	"testing"
	"time"
)

func TestCheckRouting(t *testing.T) {
	held := func(rv uint64, uid string, tok int64) StatusObs {
		return StatusObs{RV: rv, Phase: "Held", Holder: "pod-" + uid, HolderUID: uid, Token: tok, MaxToken: tok}
	}
	releasing := func(rv uint64, uid string, tok int64) StatusObs {
		o := held(rv, uid, tok)
		o.Phase = "Releasing"
		return o
	}
	slice := func(rv uint64, uids ...string) SliceObs { return SliceObs{RV: rv, Ready: uids} }
	tests := []struct {
		name   string
		obs    []StatusObs
		slices []SliceObs
		want   string // substring of the one violation; "" for none
	}{
		{"attested handoff: emptied, then listed after Held",
			[]StatusObs{held(10, "a", 5), held(20, "b", 7)},
			[]SliceObs{slice(11, "a"), slice(15), slice(21, "b")}, ""},
		{"Releasing wait: emptied before the Releasing write",
			[]StatusObs{held(10, "a", 5), releasing(13, "a", 5), held(30, "b", 9)},
			[]SliceObs{slice(11, "a"), slice(12), slice(31, "b")}, ""},
		{"back to Held with the same token: listed again",
			[]StatusObs{held(10, "a", 5), releasing(13, "a", 5), held(20, "a", 5)},
			[]SliceObs{slice(11, "a"), slice(12), slice(21, "a")}, ""},
		{"deleted slice lists nobody", []StatusObs{held(10, "a", 5), releasing(20, "a", 5)},
			[]SliceObs{slice(11, "a"), {RV: 19}}, ""},
		{"listed before its Held was written",
			[]StatusObs{held(10, "a", 5), held(20, "b", 7)},
			[]SliceObs{slice(11, "a"), slice(15), slice(18, "b")}, "lists pod b as ready while the lock's status (rv 10) is Held, holder pod-a"},
		{"not emptied before Releasing",
			[]StatusObs{held(10, "a", 5), releasing(13, "a", 5), held(30, "b", 9)},
			[]SliceObs{slice(11, "a"), slice(14), slice(31, "b")}, "status rv 13: the slice (rv 11) lists pod a as ready while the lock's status (rv 13) is Releasing"},
		{"two pods", []StatusObs{held(10, "a", 5)}, []SliceObs{slice(11, "a", "b")}, "lists 2 pods as ready: a, b"},
		{"listed before any status", nil, []SliceObs{slice(3, "a")}, "is unpublished"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vs := CheckRouting(tt.obs, tt.slices)
			switch {
			case tt.want == "" && len(vs) > 0:
				t.Errorf("CheckRouting = %v, want none", vs)
			case tt.want != "" && (len(vs) == 0 || !strings.Contains(vs[0].Detail, tt.want)):
				t.Errorf("CheckRouting = %v, want a violation containing %q", vs, tt.want)
			}
		})
	}
}

// A run's worker mode and routing come from its faults, and its extra faults never need
// another worker mode nor act on a worker process that is not the Elector's.
func TestScheduleWorkerModes(t *testing.T) {
	tm := Timing{Lease: 3 * time.Second, LockDelay: 3 * time.Second, ElectionTTL: 5 * time.Second}
	modes := map[string]bool{}
	for run := range 20 * len(Kinds) {
		s := NewSchedule(7, run, Kinds, 3, tm)
		mode := s.Worker()
		modes[mode] = true
		if want := WorkerOf(s.Faults[0].Kind); want != "" && mode != want {
			t.Fatalf("run %d (%s): Worker() = %q, want %q", run, s, mode, want)
		}
		for _, f := range s.Faults[1:] {
			if m := WorkerOf(f.Kind); m != "" && m != mode {
				t.Fatalf("run %d (%s): extra %s needs worker %s in a %s run", run, s, f.Kind, m, mode)
			}
			if mode != WorkerElector && WorkerOf(f.Kind) == "" && !anyWorker[f.Kind] {
				t.Fatalf("run %d (%s): extra %s acts on the worker process of a %s run", run, s, f.Kind, mode)
			}
		}
		if s.Routing() != (s.Counts()[RoutingMove] > 0) {
			t.Fatalf("run %d (%s): Routing() = %v", run, s, s.Routing())
		}
	}
	if len(modes) != 3 {
		t.Fatalf("worker modes drawn: %v, want all three", modes)
	}
}
