package chaos

import (
	"reflect"
	"testing"
	"time"
)

var globalTiming = GlobalTiming{Lease: 6 * time.Second, LockDelay: 12 * time.Second, Grant: 6 * time.Second}

func TestNewGlobalSchedule(t *testing.T) {
	firsts := map[string]bool{}
	for run := range 20 {
		s := NewGlobalSchedule(7, run, globalTiming)
		if again := NewGlobalSchedule(7, run, globalTiming); !reflect.DeepEqual(s, again) {
			t.Fatalf("NewGlobalSchedule(7, %d) = %v, then %v: not deterministic", run, s, again)
		}
		if n := len(s.Faults); n < 1 || n > 2 {
			t.Fatalf("NewGlobalSchedule(7, %d) has %d faults, want 1 or 2", run, n)
		}
		if want := GlobalKinds[(7+run)%len(GlobalKinds)]; s.Faults[0].Kind != want {
			t.Errorf("run %d: first fault %s, want %s", run, s.Faults[0].Kind, want)
		}
		firsts[s.Faults[0].Kind] = true
		for _, f := range s.Faults {
			if f.Gap < 2*time.Second || f.Hold <= 0 {
				t.Errorf("run %d: %s gap %v hold %v, want gap >= 2s and a hold", run, f.Kind, f.Gap, f.Hold)
			}
			switch f.Kind {
			case GlobalManagerCut:
				if f.Hold <= globalTiming.Grant+globalTiming.LockDelay {
					t.Errorf("run %d: cut held %v, want above G + D so that the other cluster takes over", run, f.Hold)
				}
			case GlobalWorkerPause:
				if f.Hold <= globalTiming.Lease+globalTiming.LockDelay {
					t.Errorf("run %d: pause held %v, want above L + D", run, f.Hold)
				}
			}
		}
	}
	if len(firsts) != len(GlobalKinds) {
		t.Errorf("20 runs started with %d kinds, want all %d", len(firsts), len(GlobalKinds))
	}
	if a, b := NewGlobalSchedule(1, 0, globalTiming), NewGlobalSchedule(2, 4, globalTiming); a.Hash() == b.Hash() {
		t.Errorf("two seeds, same first kind: hash %s for both; want different schedules", a.Hash())
	}
}

func TestFailoverBound(t *testing.T) {
	if got, want := globalTiming.FailoverBound(), 19*time.Second; got != want {
		t.Errorf("FailoverBound() = %v, want %v (G + D + 1 s)", got, want)
	}
	if !Failover(GlobalManagerKill) || !Failover(GlobalManagerCut) || Failover(GlobalPodDelete) || Failover(GlobalEtcdMemberKill) {
		t.Error("Failover: want true for the manager kill and cut only")
	}
}

func TestEndsTermAndAcceptedAbove(t *testing.T) {
	for _, k := range GlobalKinds {
		if got, want := EndsTerm(k), k != GlobalEtcdMemberKill; got != want {
			t.Errorf("EndsTerm(%s) = %v, want %v", k, got, want)
		}
	}
	outs := []Outcome{{Op: "fence", Token: 9, Accepted: true}, {Op: "append", Token: 7, Accepted: true}, {Op: "append", Token: 11, Accepted: false}}
	if AcceptedAbove(outs, 7) {
		t.Error("AcceptedAbove(7) = true; a fence and a refused append are no write above 7")
	}
	if !AcceptedAbove(append(outs, Outcome{Op: "append", Token: 9, Accepted: true}), 7) {
		t.Error("AcceptedAbove(7) = false with an accepted append under token 9")
	}
}

func TestFirstWrite(t *testing.T) {
	ok := func(tok, m int64) Event { return Event{Kind: EvReturn, Token: tok, Mono: m, Result: ResultOK} }
	hs := []WorkerHistory{
		{Pod: "east/w-0", UID: "e0", Events: []Event{ok(5, 10), ok(5, 20), ok(5, 30)}},
		{Pod: "west/w-0", UID: "w0", Events: []Event{{Kind: EvReturn, Token: 9, Mono: 40, Result: ResultStale}, ok(9, 50), ok(9, 60)}},
		{Pod: "west/w-1", UID: "w1", Events: []Event{{Kind: EvReturn, Token: 11, Mono: 45, Result: ResultError}, ok(11, 55)}},
	}
	west := func(uid string) bool { return uid == "w0" || uid == "w1" }
	tests := []struct {
		name  string
		after int64
		in    func(string) bool
		want  Write
		found bool
	}{
		{"the other cluster's first accepted write", 25, west, Write{Pod: "west/w-0", UID: "w0", Token: 9, Mono: 50}, true},
		{"stale and unanswered writes do not count", 39, west, Write{Pod: "west/w-0", UID: "w0", Token: 9, Mono: 50}, true},
		{"the earliest across workers", 50, west, Write{Pod: "west/w-1", UID: "w1", Token: 11, Mono: 55}, true},
		{"the fault's own instant does not count", 20, func(u string) bool { return u == "e0" }, Write{Pod: "east/w-0", UID: "e0", Token: 5, Mono: 30}, true},
		{"none after", 60, west, Write{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found := FirstWrite(hs, tt.after, tt.in)
			if got != tt.want || found != tt.found {
				t.Errorf("FirstWrite(after %d) = %+v, %v; want %+v, %v", tt.after, got, found, tt.want, tt.found)
			}
		})
	}
}

func TestQuantile(t *testing.T) {
	s := func(xs ...int) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x)*time.Second)
		}
		return out
	}
	tests := []struct {
		ds   []time.Duration
		q    float64
		want time.Duration
	}{
		{nil, 0.5, 0},
		{s(7), 0.5, 7 * time.Second},
		{s(19, 17, 18), 0.5, 18 * time.Second},
		{s(20, 17, 19, 18), 0.5, 18 * time.Second},
		{s(20, 17, 19, 18), 1, 20 * time.Second},
		{s(20, 17, 19, 18), 0, 17 * time.Second},
	}
	for _, tt := range tests {
		if got := Quantile(tt.ds, tt.q); got != tt.want {
			t.Errorf("Quantile(%v, %v) = %v, want %v", tt.ds, tt.q, got, tt.want)
		}
	}
}

func TestHandoverGaps(t *testing.T) {
	s := int64(time.Second)
	ivs := []Interval{
		{UID: "e0", Token: 5, Start: 0, End: 10 * s},
		{UID: "w0", Token: 11, Start: 20 * s, End: 30 * s}, // east to west: 10 s
		{UID: "w1", Token: 13, Start: 31 * s, End: 40 * s}, // west to west: no handover
		{UID: "e1", Token: 20, Start: 43 * s, End: 50 * s}, // west to east: 3 s
		{UID: "e0", Token: 22, Start: 51 * s, End: 55 * s}, // east to east again
		{UID: "w0", Token: 30, Start: 54 * s, End: 60 * s}, // overlaps e0: no gap
	}
	cluster := func(uid string) string { return uid[:1] }
	got := HandoverGaps(ivs, cluster)
	want := []time.Duration{3 * time.Second, 10 * time.Second}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("HandoverGaps = %v, want %v", got, want)
	}
}
