package chaos

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Every checker is fed one good history and deliberately bad ones: a checker that cannot
// fail proves nothing.

func TestCheckTokens(t *testing.T) {
	good := []StatusObs{
		{RV: 1, Phase: "Pending"},
		{RV: 2, Phase: "Held", HolderUID: "a", Token: 10, MaxToken: 10, Epoch: 3},
		{RV: 3, Phase: "Releasing", HolderUID: "a", Token: 10, MaxToken: 10, Epoch: 3},
		{RV: 5, Phase: "Held", HolderUID: "b", Token: 14, MaxToken: 14, Epoch: 4},
		{RV: 6, Phase: "Held", HolderUID: "b", Token: 20, MaxToken: 20, Epoch: 4}, // regranted
	}
	tests := []struct {
		name string
		obs  []StatusObs
		want string // substring of the violation; "" for none
	}{
		{"good", good, ""},
		{"token goes back", append(good[:4:4], StatusObs{RV: 7, Phase: "Held", HolderUID: "c", Token: 12, MaxToken: 14, Epoch: 4}), "fencingToken went back"},
		{"max token goes back", append(good[:4:4], StatusObs{RV: 7, Phase: "Held", HolderUID: "b", Token: 14, MaxToken: 13, Epoch: 4}), "maxFencingToken went back"},
		{"epoch goes back", append(good[:4:4], StatusObs{RV: 7, Phase: "Held", HolderUID: "b", Token: 14, MaxToken: 14, Epoch: 2}), "controllerEpoch went back"},
		{"same token two holders", append(good[:4:4], StatusObs{RV: 7, Phase: "Held", HolderUID: "c", Token: 14, MaxToken: 14, Epoch: 4}), "granted to c"},
		{"token above max", []StatusObs{{RV: 1, Phase: "Held", HolderUID: "a", Token: 5, MaxToken: 4}}, "above maxFencingToken"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, CheckTokens(tt.obs), tt.want)
		})
	}
}

func TestCheckLedger(t *testing.T) {
	tests := []struct {
		name string
		outs []Outcome
		want string
	}{
		{"good", []Outcome{{Token: 3, Writer: "a", Accepted: true}, {Token: 3, Writer: "a", Accepted: true}, {Token: 2, Writer: "b", Accepted: false}, {Token: 5, Writer: "b", Accepted: true}}, ""},
		{"lower token accepted", []Outcome{{Token: 5, Writer: "a", Accepted: true}, {Token: 4, Writer: "b", Accepted: true}}, "after accepting token 5"},
		{"one token two writers", []Outcome{{Token: 5, Writer: "a", Accepted: true}, {Token: 5, Writer: "b", Accepted: true}}, "already accepted from a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, CheckLedger(tt.outs), tt.want)
		})
	}
}

func TestCheckLinearizable(t *testing.T) {
	ok := func(client int, w string, tok, call, ret, hi int64) LedgerOp {
		return LedgerOp{Client: client, Writer: w, Op: "append", Token: tok, Call: call, Return: ret, Accepted: true, Highest: hi}
	}
	stale := func(client int, w string, tok, call, ret, hi int64) LedgerOp {
		return LedgerOp{Client: client, Writer: w, Op: "append", Token: tok, Call: call, Return: ret, Highest: hi}
	}
	lost := func(client int, w string, tok, call int64) LedgerOp {
		return LedgerOp{Client: client, Writer: w, Op: "append", Token: tok, Call: call, Return: math.MaxInt64, Ambiguous: true}
	}
	tests := []struct {
		name string
		ops  []LedgerOp
		want porcupine.CheckResult
	}{
		{"sequential handover", []LedgerOp{ok(0, "a", 3, 0, 1, 3), ok(1, "b", 5, 2, 3, 5), stale(0, "a", 3, 4, 5, 5)}, porcupine.Ok},
		{"accepted below a concurrent higher token", []LedgerOp{ok(0, "a", 3, 0, 10, 5), ok(1, "b", 5, 1, 2, 5)}, porcupine.Illegal}, // no order explains both
		{"stale write accepted", []LedgerOp{ok(1, "b", 5, 0, 1, 5), ok(0, "a", 3, 2, 3, 5)}, porcupine.Illegal},
		{"stale write refused", []LedgerOp{ok(1, "b", 5, 0, 1, 5), stale(0, "a", 3, 2, 3, 5)}, porcupine.Ok},
		{"highest reported wrong", []LedgerOp{ok(0, "a", 3, 0, 1, 3), stale(1, "b", 2, 2, 3, 4)}, porcupine.Illegal},
		{"same token second writer", []LedgerOp{ok(0, "a", 5, 0, 1, 5), ok(1, "b", 5, 2, 3, 5)}, porcupine.Illegal},
		{"lost write may have landed", []LedgerOp{lost(0, "a", 7, 0), stale(1, "b", 5, 2, 3, 7)}, porcupine.Ok},
		{"lost write may not have landed", []LedgerOp{lost(0, "a", 7, 0), ok(1, "b", 5, 2, 3, 5)}, porcupine.Ok},
		{"lost write cannot explain a refusal of a higher one", []LedgerOp{lost(0, "a", 4, 0), stale(1, "b", 5, 2, 3, 5)}, porcupine.Illegal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, vs := CheckLinearizable(tt.ops, 5*time.Second)
			if got != tt.want {
				t.Fatalf("CheckLinearizable = %v, want %v", got, tt.want)
			}
			if (got == porcupine.Illegal) != (len(vs) > 0) {
				t.Fatalf("CheckLinearizable = %v with violations %v", got, vs)
			}
		})
	}
}

func TestOverlaps(t *testing.T) {
	sec := int64(time.Second)
	a := Interval{Pod: "w-0", UID: "a", Token: 3, Start: 0, End: 2 * sec}
	b := Interval{Pod: "w-1", UID: "b", Token: 5, Start: 3 * sec, End: 5 * sec}
	overlapping := Interval{Pod: "w-1", UID: "b", Token: 5, Start: 1 * sec, End: 4 * sec}
	sameToken := Interval{Pod: "w-2", UID: "c", Token: 3, Start: 10 * sec, End: 11 * sec}

	if os, vs := Overlaps([]Interval{a, b}); len(os) != 0 || len(vs) != 0 {
		t.Fatalf("Overlaps(disjoint) = %v, %v, want none", os, vs)
	}
	os, vs := Overlaps([]Interval{overlapping, a})
	if len(os) != 1 || os[0].Duration != time.Second || len(vs) != 0 {
		t.Fatalf("Overlaps(overlapping) = %v, %v, want one of 1s and no violation", os, vs)
	}
	_, vs = Overlaps([]Interval{a, b, sameToken})
	expect(t, vs, "both led with token 3")
}

func TestIntervals(t *testing.T) {
	h := WorkerHistory{Pod: "w-0", UID: "a", Events: []Event{
		{Kind: EvStart, Token: 3, Mono: 100},
		{Kind: EvCall, Token: 3, Mono: 110, Until: 500, ID: 1},
		{Kind: EvReturn, Token: 3, Mono: 120, ID: 1, Result: ResultOK, Highest: 3},
		{Kind: EvCall, Token: 3, Mono: 210, Until: 600, ID: 2},
		{Kind: EvEnd, Token: 3, Mono: 900}, // woke from a pause: the deadline bounds the term
		{Kind: EvStart, Token: 7, Mono: 1000},
		{Kind: EvCall, Token: 7, Mono: 1010, Until: 1800, ID: 3},
	}, Exited: 1200}
	got := h.Intervals()
	want := []Interval{{Pod: "w-0", UID: "a", Token: 3, Start: 100, End: 600}, {Pod: "w-0", UID: "a", Token: 7, Start: 1000, End: 1200}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Intervals() = %v, want %v", got, want)
	}
	ops := LedgerOps([]WorkerHistory{h})
	if len(ops) != 3 || ops[0].Ambiguous || !ops[1].Ambiguous || !ops[2].Ambiguous || ops[1].Return != math.MaxInt64 {
		t.Fatalf("LedgerOps() = %+v, want one answered and two ambiguous writes", ops)
	}
}

func TestCheckLiveness(t *testing.T) {
	sec := int64(time.Second)
	expect(t, CheckLiveness(0, 3*sec, 5*time.Second), "")
	expect(t, CheckLiveness(0, 6*sec, 5*time.Second), "after the faults healed")
	expect(t, CheckLiveness(0, 0, 5*time.Second), "no holder wrote")
}

func TestScheduleDeterministic(t *testing.T) {
	tm := Timing{Lease: 3 * time.Second, LockDelay: 3 * time.Second, ElectionTTL: 3 * time.Second}
	seen := map[string]bool{}
	for run := range len(Kinds) {
		a, b := NewSchedule(42, run, Kinds, 2, tm), NewSchedule(42, run, Kinds, 2, tm)
		if a.Hash() != b.Hash() {
			t.Fatalf("NewSchedule(42, %d) hashes %s and %s, want equal", run, a.Hash(), b.Hash())
		}
		seen[a.Faults[0].Kind] = true
	}
	if len(seen) != len(Kinds) {
		t.Fatalf("%d runs cover %d kinds, want all %d", len(Kinds), len(seen), len(Kinds))
	}
	if NewSchedule(42, 0, Kinds, 2, tm).Hash() == NewSchedule(43, 0, Kinds, 2, tm).Hash() {
		t.Fatalf("seeds 42 and 43 give the same schedule")
	}
}

// expect fails unless vs is empty (want "") or has a violation containing want.
func expect(t *testing.T, vs []Violation, want string) {
	t.Helper()
	if want == "" {
		if len(vs) > 0 {
			t.Fatalf("violations %v, want none", vs)
		}
		return
	}
	for _, v := range vs {
		if strings.Contains(v.Detail, want) {
			return
		}
	}
	t.Fatalf("violations %v, want one containing %q", vs, want)
}

func TestCheckLedgerTwoProcessesOfOnePod(t *testing.T) {
	outs := []Outcome{{Token: 5, Writer: "uid-a/0123456789abcdef", Accepted: true}, {Token: 5, Writer: "uid-a/fedcba9876543210", Accepted: true}}
	expect(t, CheckLedger(outs), "two processes of one pod")
}

// A restarted process writes under the pod's UID with its own writer ID: two processes of one
// pod with accepted writes under one token is the lost update the per-process writer exists to
// prevent.
func TestCheckIncarnations(t *testing.T) {
	proc := func(inc string, evs ...Event) WorkerHistory {
		return WorkerHistory{Pod: "w-0", UID: "a", Events: append([]Event{{Kind: EvWriter, Writer: "a/" + inc}}, evs...)}
	}
	ok := func(tok int64, id int) Event {
		return Event{Kind: EvReturn, Token: tok, ID: id, Result: ResultOK, Highest: tok}
	}
	stale := func(tok int64, id int) Event {
		return Event{Kind: EvReturn, Token: tok, ID: id, Result: ResultStale, Highest: tok}
	}
	old := proc("0123456789abcdef", ok(5, 1), ok(5, 2))
	tests := []struct {
		name string
		hs   []WorkerHistory
		want string
	}{
		{"restart with a new token", []WorkerHistory{old, proc("fedcba9876543210", ok(9, 1))}, ""},
		{"restart refused the old token", []WorkerHistory{old, proc("fedcba9876543210", stale(5, 1), ok(9, 2))}, ""},
		{"another pod, another token", []WorkerHistory{old, {Pod: "w-1", UID: "b", Events: []Event{ok(7, 1)}}}, ""},
		{"restart wrote under the old token", []WorkerHistory{old, proc("fedcba9876543210", ok(5, 1))}, "2 processes of pod a wrote under token 5: a/0123456789abcdef, a/fedcba9876543210"},
		{"histories without writer IDs", []WorkerHistory{{UID: "a", Events: []Event{ok(5, 1)}}, {UID: "a", Events: []Event{ok(5, 1)}}}, "a (process 0), a (process 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, CheckIncarnations(tt.hs), tt.want)
		})
	}
}

// The linearizability model must see the writer each process presented: the ledger refuses
// the restarted process's fence raise under the old token, which under the pod UID alone
// would look like a refusal of the same writer (not linearizable).
func TestLedgerOpsUseWriterIDs(t *testing.T) {
	hs := []WorkerHistory{
		{UID: "a", Events: []Event{{Kind: EvWriter, Writer: "a/0123456789abcdef"}, {Kind: EvCall, ID: 1, Op: "fence", Token: 5, Mono: 1}, {Kind: EvReturn, ID: 1, Token: 5, Mono: 2, Result: ResultOK, Highest: 5}}},
		{UID: "a", Events: []Event{{Kind: EvWriter, Writer: "a/fedcba9876543210"}, {Kind: EvCall, ID: 1, Op: "fence", Token: 5, Mono: 3}, {Kind: EvReturn, ID: 1, Token: 5, Mono: 4, Result: ResultStale, Highest: 5}}},
	}
	ops := LedgerOps(hs)
	if len(ops) != 2 || ops[0].Writer != "a/0123456789abcdef" || ops[1].Writer != "a/fedcba9876543210" {
		t.Fatalf("LedgerOps() = %+v, want the writer IDs of the two processes", ops)
	}
	if res, _, vs := CheckLinearizable(ops, 5*time.Second); res != porcupine.Ok || len(vs) > 0 {
		t.Fatalf("CheckLinearizable = %v, %v, want Ok", res, vs)
	}
	for i := range hs {
		hs[i].Events = hs[i].Events[1:] // no writer IDs: one writer, the pod
	}
	if res, _, _ := CheckLinearizable(LedgerOps(hs), 5*time.Second); res != porcupine.Illegal {
		t.Fatalf("CheckLinearizable without writer IDs = %v, want Illegal (the model would admit the equal token)", res)
	}
}

// TestLedgerOpsWriterPerTerm: one process leading one token in two terms presents two
// writers (pkg/leadership draws one per term): the second term's refused raise is no
// violation.
func TestLedgerOpsWriterPerTerm(t *testing.T) {
	hs := []WorkerHistory{{UID: "a", Events: []Event{{Kind: EvWriter, Writer: "a/0123456789abcdef"},
		{Kind: EvStart, Token: 5, Writer: "a/0123456789abcdef"}, {Kind: EvCall, ID: 1, Op: "fence", Token: 5, Mono: 1}, {Kind: EvReturn, ID: 1, Token: 5, Mono: 2, Result: ResultOK, Highest: 5},
		{Kind: EvStart, Token: 5, Writer: "a/fedcba9876543210"}, {Kind: EvCall, ID: 2, Op: "fence", Token: 5, Mono: 3}, {Kind: EvReturn, ID: 2, Token: 5, Mono: 4, Result: ResultStale, Highest: 5},
	}}}
	ops := LedgerOps(hs)
	if len(ops) != 2 || ops[1].Writer != "a/fedcba9876543210" {
		t.Fatalf("LedgerOps() = %+v, want the second term's writer on its raise", ops)
	}
	if res, _, vs := CheckLinearizable(ops, 5*time.Second); res != porcupine.Ok || len(vs) > 0 {
		t.Fatalf("CheckLinearizable = %v, %v, want Ok", res, vs)
	}
}

func TestCheckStalls(t *testing.T) {
	stalled := func(res string) WorkerHistory {
		return WorkerHistory{UID: "a", Events: []Event{
			{Kind: EvCall, ID: 1, Token: 5}, {Kind: EvReturn, ID: 1, Token: 5, Result: ResultOK, Highest: 5},
			{Kind: EvCall, ID: 2, Token: 5, Stalled: true}, {Kind: EvReturn, ID: 2, Token: 5, Result: res, Highest: 9},
		}}
	}
	unanswered := WorkerHistory{UID: "a", Events: []Event{{Kind: EvCall, ID: 1, Token: 5, Stalled: true}}}
	notStalled := WorkerHistory{UID: "a", Events: []Event{{Kind: EvCall, ID: 1, Token: 5}, {Kind: EvReturn, ID: 1, Token: 5, Result: ResultStale, Highest: 9}}}
	tests := []struct {
		name     string
		hs       []WorkerHistory
		injected int
		want     string
	}{
		{"refused", []WorkerHistory{stalled(ResultStale)}, 1, ""},
		{"no stall kind", []WorkerHistory{notStalled}, 0, ""},
		{"accepted", []WorkerHistory{stalled(ResultOK)}, 1, "none refused by the ledger (1 accepted, 0 without an answer)"},
		{"never answered", []WorkerHistory{unanswered}, 1, "(0 accepted, 1 without an answer)"},
		{"another write refused does not count", []WorkerHistory{notStalled}, 1, "0 writes stalled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, CheckStalls(tt.hs, tt.injected), tt.want)
		})
	}
	if st := Stalls([]WorkerHistory{stalled(ResultStale), stalled(ResultError), unanswered}); st != (StallOutcome{Stalled: 3, Refused: 1, Lost: 2}) {
		t.Fatalf("Stalls() = %+v, want 3 stalled, 1 refused, 2 lost", st)
	}
}

func TestCheckExercised(t *testing.T) {
	tests := []struct {
		name    string
		tallies map[string]LedgerTally
		kinds   []string
		want    string
	}{
		{"refusals in both", map[string]LedgerTally{LedgerPods: {Runs: 30, Refused: 4}, LedgerEngine: {Runs: 5, Refused: 1}}, Kinds, ""},
		{"pods ledgers refused nothing", map[string]LedgerTally{LedgerPods: {Runs: 30, Accepted: 2000}, LedgerEngine: {Runs: 5, Refused: 1}}, Kinds,
			"the pods ledgers refused no write in 30 runs (2000 accepted)"},
		{"engine ledgers refused nothing", map[string]LedgerTally{LedgerPods: {Runs: 30, Refused: 4}, LedgerEngine: {Runs: 5}}, Kinds, "the engine ledgers refused no write"},
		{"no stall kind drawn from", map[string]LedgerTally{LedgerPods: {Runs: 30}}, []string{WorkerKill, APIHold}, ""},
		{"no engine runs", map[string]LedgerTally{LedgerPods: {Runs: 30, Refused: 4}}, Kinds, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, CheckExercised(tt.tallies, tt.kinds), tt.want)
		})
	}
}

// A kind that needs a pod shape sets the run's (as its first fault) and is never drawn as
// an extra fault of a run of another shape, where it could not happen.
func TestScheduleShapes(t *testing.T) {
	tm := Timing{Lease: 3 * time.Second, LockDelay: 3 * time.Second, ElectionTTL: 3 * time.Second}
	want := map[string]string{CrashRestart: ShapeRestart, CrashRestartSidecar: ShapeSidecar, SidecarDelete: ShapeSidecar, WorkerKill: ShapePlain, WorkerStall: ShapePlain}
	for seed := range uint64(20) {
		for run := range len(Kinds) {
			s := NewSchedule(seed, run, Kinds, 3, tm)
			first := s.Faults[0].Kind
			if w, ok := want[first]; ok && s.Shape() != w {
				t.Fatalf("schedule starting with %s has shape %s, want %s", first, s.Shape(), w)
			}
			for _, f := range s.Faults[1:] {
				if shape := ShapeOf(f.Kind); shape != "" && shape != s.Shape() {
					t.Fatalf("seed %d run %d: extra fault %s needs shape %s in a run of shape %s (%s)", seed, run, f.Kind, shape, s.Shape(), s)
				}
			}
		}
	}
}
