package chaos

import (
	"testing"
	"time"
)

// termEvents is one term's events in a history: OnStartedLeading at start, one write whose Valid()
// promised validity until until, and the end of the term at end (0: none recorded, the
// process was killed: the deadline bounds it).
func termEvents(slot int32, token, start, until, end int64) []Event {
	evs := []Event{
		{Kind: EvStart, Slot: slot, Token: token, Mono: start},
		{Kind: EvCall, Slot: slot, Token: token, ID: int(token), Op: "fence", Mono: start + 1, Until: until},
		{Kind: EvReturn, Slot: slot, Token: token, ID: int(token), Op: "fence", Mono: start + 2, Result: ResultOK, Highest: token},
	}
	if end != 0 {
		evs = append(evs, Event{Kind: EvEnd, Slot: slot, Token: token, Mono: end})
	}
	return evs
}

func history(pod, uid string, terms ...[]Event) WorkerHistory {
	h := WorkerHistory{Pod: pod, UID: uid, Events: []Event{{Kind: EvWriter, Writer: uid + "/0000000000000001"}}}
	for _, t := range terms {
		h.Events = append(h.Events, t...)
	}
	return h
}

func intervalsOf(hs ...WorkerHistory) []Interval {
	var ivs []Interval
	for _, h := range hs {
		ivs = append(ivs, h.Intervals()...)
	}
	return ivs
}

// TestCheckHoldersFailsOnNPlusOne: four pods of a three-slot lock hold valid terms at once,
// by their own validity: the fourth pod's term in slot 1 begins while slot 1's holder still
// has a deadline Valid() promised it (the controller granted it early). The checker must
// count four, whichever slot each pod says it held.
func TestCheckHoldersFailsOnNPlusOne(t *testing.T) {
	ivs := intervalsOf(
		history("w-0", "a", termEvents(0, 10, 0, 1000, 0)),
		history("w-1", "b", termEvents(1, 11, 0, 600, 0)), // valid until 600, by its last Valid()
		history("w-2", "c", termEvents(2, 12, 0, 1000, 0)),
		history("w-3", "d", termEvents(1, 15, 500, 1000, 0)), // slot 1 again at 500: b still valid
	)
	most, vs := CheckHolders(ivs, 3, 0)
	if most != 4 {
		t.Errorf("CheckHolders: most = %d, want 4", most)
	}
	expect(t, vs, "4 pods held valid terms at once for 100ns")
	expect(t, vs, "w-3 (d) slot 1 token 15")
	expect(t, vs, "w-1 (b) slot 1 token 11")
	// The same history with the fourth pod claiming a slot of its own is as bad: the count
	// does not read the slots.
	ivs[3].Slot = 3
	if _, vs := CheckHolders(ivs, 3, 0); len(vs) == 0 {
		t.Errorf("CheckHolders with the fourth pod in slot 3: no violation, want one")
	}
	// Within the tolerance it passes (the overlap is 100 ns).
	if _, vs := CheckHolders(ivs, 3, 100*time.Nanosecond); len(vs) != 0 {
		t.Errorf("CheckHolders with a 100 ns tolerance: %v, want none", vs)
	}
}

// TestCheckHoldersPassesOnN: three pods hold the three slots; slot 1 changes hands at the
// instant its holder's validity ended (its end event), and again once the next holder was
// killed and its last deadline passed: never more than three.
func TestCheckHoldersPassesOnN(t *testing.T) {
	ivs := intervalsOf(
		history("w-0", "a", termEvents(0, 10, 0, 1000, 0)),
		history("w-1", "b", termEvents(1, 11, 0, 900, 400)), // ended at 400, before its deadline
		history("w-2", "c", termEvents(2, 12, 0, 1000, 0)),
		history("w-3", "d", termEvents(1, 15, 400, 700, 0)), // killed: valid until 700
		history("w-4", "e", termEvents(1, 18, 700, 1000, 0)),
	)
	most, vs := CheckHolders(ivs, 3, 0)
	expect(t, vs, "")
	if most != 3 {
		t.Errorf("CheckHolders: most = %d, want 3", most)
	}
	// With one slot fewer the same history holds three pods at once: a violation.
	if _, vs := CheckHolders(ivs, 2, 0); len(vs) == 0 {
		t.Errorf("CheckHolders(n=2) on three holders: no violation, want one")
	}
}

// TestCheckHoldersCountsPods: two processes of one pod (a restart) with intervals that touch
// one another count as one pod, and an empty history counts nothing.
func TestCheckHoldersCountsPods(t *testing.T) {
	ivs := intervalsOf(
		history("w-0", "a", termEvents(0, 10, 0, 500, 0)),
		history("w-0", "a", termEvents(0, 10, 400, 1000, 0)), // same UID
		history("w-1", "b", termEvents(1, 11, 0, 1000, 0)),
		history("w-2", "c"),
	)
	most, vs := CheckHolders(ivs, 2, 0)
	expect(t, vs, "")
	if most != 2 {
		t.Errorf("CheckHolders: most = %d, want 2", most)
	}
}

// TestCheckOneSlotPerPod: a pod's term in slot 1 and its later term in slot 2 are two terms,
// not one and not overlapping; the same pod valid in both at once is a violation.
func TestCheckOneSlotPerPod(t *testing.T) {
	seq := intervalsOf(
		history("w-0", "a", termEvents(1, 10, 0, 600, 500), termEvents(2, 14, 500, 1000, 0)),
		history("w-1", "b", termEvents(0, 11, 0, 1000, 0)),
		history("w-2", "c", termEvents(2, 12, 0, 400, 400), termEvents(1, 16, 500, 1000, 0)),
	)
	if len(seq) != 5 {
		t.Fatalf("intervals %v, want 5", seq)
	}
	if seq[0].Slot != 1 || seq[0].Token != 10 || seq[0].End != 500 || seq[1].Slot != 2 || seq[1].Token != 14 || seq[1].Start != 500 {
		t.Fatalf("pod a's intervals %v, %v: want slot 1 token 10 [0,500), slot 2 token 14 [500,1000)", seq[0], seq[1])
	}
	expect(t, CheckOneSlotPerPod(seq, 0), "")
	if most, vs := CheckHolders(seq, 3, 0); most != 3 || len(vs) != 0 {
		t.Errorf("CheckHolders = %d, %v; want 3, none", most, vs)
	}
	both := intervalsOf(
		history("w-0", "a", termEvents(1, 10, 0, 600, 0)), // no end: valid until 600
		history("w-0", "a", termEvents(2, 14, 500, 1000, 0)),
	)
	expect(t, CheckOneSlotPerPod(both, 0), "w-0 (a) held valid terms in two slots at once for 100ns: slot 1 token 10 and slot 2 token 14")
}
