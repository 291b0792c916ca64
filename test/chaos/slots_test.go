package chaos

import (
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// write is one write of a term: its call and its return with result res.
func write(slot int32, token int64, id int, at int64, res string, highest int64) []Event {
	return []Event{
		{Kind: EvCall, Slot: slot, Token: token, ID: id, Op: "append", Mono: at, Until: at + 1000},
		{Kind: EvReturn, Slot: slot, Token: token, ID: id, Op: "append", Mono: at + 1, Result: res, Highest: highest},
	}
}

// TestBySlotKeepsAPodsSlotsApart: pod a holds slot 1 with token 70, then slot 2 with token 50
// (each slot has its own key: its tokens are not comparable with another slot's), and writes
// each term to its slot's ledger. Read as one ledger, the second term's accepted write is a
// stale token accepted (porcupine: Illegal); split per slot, each ledger's history is fine.
func TestBySlotKeepsAPodsSlotsApart(t *testing.T) {
	a := history("w-0", "a",
		termEvents(1, 70, 0, 400, 400), write(1, 70, 100, 100, ResultOK, 70),
		termEvents(2, 50, 500, 900, 900), write(2, 50, 101, 600, ResultOK, 50))
	b := history("w-1", "b",
		termEvents(2, 40, 0, 400, 400), write(2, 40, 100, 100, ResultOK, 40),
		write(2, 40, 101, 700, ResultStale, 50)) // b's late write, refused by slot 2's ledger
	hs := []WorkerHistory{a, b}

	if res, _, _ := CheckLinearizable(LedgerOps(hs), time.Second); res != porcupine.Illegal {
		t.Fatalf("both slots read as one ledger: %s, want Illegal (the test would show nothing)", res)
	}
	by, vs := BySlot(hs, 3)
	expect(t, vs, "")
	if len(by) != 3 || len(by[0]) != 2 {
		t.Fatalf("BySlot: %d slots of %d histories, want 3 of 2", len(by), len(by[0]))
	}
	for i, slot := range by {
		if res, _, vs := CheckLinearizable(LedgerOps(slot), time.Second); res != porcupine.Ok || len(vs) > 0 {
			t.Errorf("slot %d: %s %v, want Ok", i, res, vs)
		}
		for k, h := range slot {
			if h.Writer() != hs[k].Writer() {
				t.Errorf("slot %d history %d: writer %q, want %q", i, k, h.Writer(), hs[k].Writer())
			}
		}
	}
	if n := len(LedgerOps(by[0])); n != 0 {
		t.Errorf("slot 0: %d writes, want 0", n)
	}
	ivs := by[1][0].Intervals()
	if len(ivs) != 1 || ivs[0].Slot != 1 || ivs[0].Token != 70 {
		t.Errorf("slot 1 intervals of pod a: %v, want one of slot 1 token 70", ivs)
	}
	ops := LedgerOps(by[2])
	if len(ops) != 5 || ops[1].Token != 40 || !ops[1].Accepted || ops[3].Token != 50 || !ops[3].Accepted || ops[4].Token != 40 || ops[4].Accepted {
		t.Errorf("slot 2 ledger ops: %+v, want fence and append 40 ok, fence and append 50 ok, append 40 refused", ops)
	}
	st := SlotStalls(by)
	if len(st) != 3 {
		t.Fatalf("SlotStalls: %v, want 3 slots", st)
	}
}

// TestBySlotRejectsUnknownSlots: a worker that acts under slot 3 of a three-slot lock is
// reported, once per slot it named, and its events are left out.
func TestBySlotRejectsUnknownSlots(t *testing.T) {
	h := history("w-0", "a", termEvents(3, 9, 0, 100, 100), termEvents(-1, 9, 200, 300, 300))
	by, vs := BySlot([]WorkerHistory{h}, 3)
	if len(vs) != 2 {
		t.Errorf("violations %v, want 2", vs)
	}
	expect(t, vs, "in slot 3 of a lock of 3 slots")
	for i := range by {
		if n := len(by[i][0].Events); n != 1 { // its EvWriter only
			t.Errorf("slot %d: %d events, want 1", i, n)
		}
	}
}

// slotted builds a status: slot 0's holder and token, then slots 1.. as index -> token
// (holder "p<index>").
func slotted(token0 int64, slots map[int32]int64) *lockv1.DistributedLockStatus {
	st := &lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, Holder: "p0", HolderUID: "p0", FencingToken: token0, MaxFencingToken: token0, ControllerEpoch: 1}
	for i := int32(1); i < 16; i++ {
		tok, ok := slots[i]
		if !ok {
			continue
		}
		uid := fmt.Sprintf("p%d", i)
		st.Slots = append(st.Slots, lockv1.SlotStatus{Index: i, Phase: lockv1.PhaseHeld, Holder: uid, HolderUID: types.UID("uid-" + uid), FencingToken: tok, MaxFencingToken: tok})
	}
	return st
}

// observe turns statuses (in resourceVersion order) into per-slot observations of n slots.
func observe(n int, sts ...*lockv1.DistributedLockStatus) [][]StatusObs {
	out := make([][]StatusObs, n)
	for k, st := range sts {
		for i, o := range ObserveSlots(uint64(k+1), int64(k), st) {
			out[i] = append(out[i], o)
		}
	}
	return out
}

func TestCheckSlotTokens(t *testing.T) {
	tests := []struct {
		name string
		sts  []*lockv1.DistributedLockStatus
		want string
	}{
		// Slot 1's tokens lie below slot 2's and slot 0's: no regression, each slot grows.
		{"each slot grows", []*lockv1.DistributedLockStatus{
			slotted(100, nil),
			slotted(100, map[int32]int64{2: 90}),
			slotted(100, map[int32]int64{1: 30, 2: 90}),
			slotted(120, map[int32]int64{1: 35, 2: 90}),
		}, ""},
		// A slot not yet listed, then listed, then gone again is no token going back to 0.
		{"slot listed late", []*lockv1.DistributedLockStatus{
			slotted(100, nil),
			slotted(100, map[int32]int64{1: 30}),
			slotted(100, nil),
		}, ""},
		{"slot 2 goes back", []*lockv1.DistributedLockStatus{
			slotted(100, map[int32]int64{1: 30, 2: 90}),
			slotted(100, map[int32]int64{1: 35, 2: 80}),
		}, "slot 2: fencingToken went back from 90 to 80"},
		{"slot 1 grants a lower token to another pod", []*lockv1.DistributedLockStatus{
			slotted(100, map[int32]int64{1: 30}),
			func() *lockv1.DistributedLockStatus {
				st := slotted(100, map[int32]int64{1: 25})
				st.Slots[0].HolderUID, st.Slots[0].MaxFencingToken = types.UID("uid-other"), 30
				return st
			}(),
		}, "slot 1: grant of token 25 to p1"},
		{"slot 0 goes back", []*lockv1.DistributedLockStatus{
			slotted(100, map[int32]int64{1: 30}),
			slotted(99, map[int32]int64{1: 30}),
		}, "slot 0: maxFencingToken went back from 100 to 99"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, CheckSlotTokens(observe(3, tt.sts...)), tt.want)
		})
	}
	// The same history read as one sequence of tokens (what a checker that ignored slots
	// would do) is a regression: the per-slot split is what makes "each slot grows" pass.
	var mixed []StatusObs
	for k, st := range tests[0].sts {
		for i := int32(0); i < 3; i++ {
			if o, ok := ObserveSlots(uint64(3*k)+uint64(i)+1, 0, st)[i]; ok {
				mixed = append(mixed, o)
			}
		}
	}
	if vs := CheckTokens(mixed); len(vs) == 0 {
		t.Errorf("every slot's tokens read as one sequence: no violation, want one")
	}
}

func TestCheckSlotLedgers(t *testing.T) {
	ok := func(tok int64, w string) Outcome { return Outcome{Op: "append", Token: tok, Writer: w, Accepted: true} }
	refused := func(tok int64, w string) Outcome { return Outcome{Op: "append", Token: tok, Writer: w} }
	good := [][]Outcome{
		{ok(100, "a"), refused(90, "b"), ok(120, "c")},
		{ok(30, "d"), ok(35, "e"), refused(30, "d")}, // below slot 0's tokens: another ledger
		{ok(90, "f")},
	}
	expect(t, CheckSlotLedgers(good), "")
	if got := Refusals(good); len(got) != 3 || got[0] != 1 || got[1] != 1 || got[2] != 0 {
		t.Errorf("Refusals = %v, want [1 1 0]", got)
	}
	bad := [][]Outcome{good[0], {ok(35, "e"), ok(30, "d")}, good[2]}
	expect(t, CheckSlotLedgers(bad), "slot 1: decision 1 accepted token 30 from d after accepting token 35")
	two := [][]Outcome{good[0], good[1], {ok(90, "f"), ok(90, "g")}}
	expect(t, CheckSlotLedgers(two), "slot 2: decision 1 accepted token 90 from g, already accepted from f")
}

func TestCheckSlotStalls(t *testing.T) {
	stalled := func(slot int32, token int64, id int, res string) []Event {
		return []Event{
			{Kind: EvCall, Slot: slot, Token: token, ID: id, Op: "append", Mono: int64(id), Stalled: true},
			{Kind: EvReturn, Slot: slot, Token: token, ID: id, Op: "append", Mono: int64(id) + 1, Result: res},
		}
	}
	hs := []WorkerHistory{
		history("w-0", "a", termEvents(0, 10, 0, 100, 100), stalled(0, 10, 20, ResultStale)),
		history("w-1", "b", termEvents(1, 11, 0, 100, 100), stalled(1, 11, 20, ResultOK)), // accepted: nobody wrote slot 1 meanwhile
		history("w-2", "c", termEvents(2, 12, 0, 100, 100), stalled(2, 12, 20, ResultStale)),
	}
	by, vs := BySlot(hs, 3)
	expect(t, vs, "")
	st := SlotStalls(by)
	if st[0].Refused != 1 || st[1].Refused != 0 || st[1].Accepted != 1 || st[2].Refused != 1 {
		t.Errorf("SlotStalls = %+v, want refused 1, 0 (accepted 1), 1", st)
	}
	vs = CheckSlotStalls(st)
	if len(vs) != 1 {
		t.Errorf("CheckSlotStalls: %v, want one violation", vs)
	}
	expect(t, vs, "slot 1: 1 writes stalled between Valid() and the send, none refused by the slot's ledger (1 accepted")
	// Counted over the whole history, as CheckStalls does, the refusals of slots 0 and 2
	// hide that slot 1's fence was never exercised.
	expect(t, CheckStalls(hs, 1), "")
	hs[1] = history("w-1", "b", termEvents(1, 11, 0, 100, 100), stalled(1, 11, 20, ResultStale))
	by, _ = BySlot(hs, 3)
	expect(t, CheckSlotStalls(SlotStalls(by)), "")
}

// A slot run has its lock of SlotLockSlots over SlotLockPods pods and draws as extra faults
// only kinds that act on no pod or on slot 0's holder; no other run draws the slot kind.
func TestScheduleSlots(t *testing.T) {
	tm := Timing{Lease: 3 * time.Second, LockDelay: 3 * time.Second, ElectionTTL: 5 * time.Second}
	slotRuns := 0
	for run := range 20 * len(Kinds) {
		s := NewSchedule(7, run, Kinds, 3, tm)
		if s.Faults[0].Kind != SlotsStall {
			if s.Slots() != 1 || s.Pods() != 3 || s.Counts()[SlotsStall] > 0 {
				t.Fatalf("run %d (%s): Slots() = %d, Pods() = %d, want 1 and 3, no %s", run, s, s.Slots(), s.Pods(), SlotsStall)
			}
			continue
		}
		slotRuns++
		if s.Slots() != SlotLockSlots || s.Pods() != SlotLockPods || s.Pods() <= s.Slots() {
			t.Fatalf("run %d (%s): Slots() = %d, Pods() = %d, want %d over %d", run, s, s.Slots(), s.Pods(), SlotLockSlots, SlotLockPods)
		}
		for _, f := range s.Faults[1:] {
			if !anyWorker[f.Kind] {
				t.Fatalf("run %d (%s): extra %s in a slot run", run, s, f.Kind)
			}
		}
	}
	if slotRuns != 20 {
		t.Fatalf("%d slot runs in %d, want 20", slotRuns, 20*len(Kinds))
	}
}
