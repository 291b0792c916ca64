package lease

import (
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

func TestSlotNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		i    int
		key  string
	}{
		{"ns/lock", 0, "ns/lock"},
		{"ns/lock", 1, "ns/lock/slot/1"},
		{"ns/lock", 15, "ns/lock/slot/15"},
	} {
		if got := SlotKey(tc.name, tc.i); got != tc.key {
			t.Errorf("SlotKey(%q, %d) = %q, want %q", tc.name, tc.i, got, tc.key)
		}
	}
	for _, tc := range []struct {
		name string
		slot bool
	}{
		{"a/slot/1", true},
		{"ns/a/slot/12", true},
		{"a/slot/0", false}, // slot 0 is the semaphore's own name
		{"a/slot/01", false},
		{"a/slot/x", false},
		{"a/slot/-1", false},
		{"a/slot", false},
		{"slot/1", false}, // no semaphore name before it
		{"a/slot/1/b", false},
		{"a", false},
	} {
		if got := isSlotName(tc.name); got != tc.slot {
			t.Errorf("isSlotName(%q) = %v, want %v", tc.name, got, tc.slot)
		}
	}
}

func TestSemStateDecisions(t *testing.T) {
	kv := func(rev int64, v value) *mvccpb.KeyValue {
		return &mvccpb.KeyValue{Key: []byte("k"), CreateRevision: rev, Value: []byte(v.encode()), Lease: 7}
	}
	three := value{Holder: "h", Slots: 3}
	for _, tc := range []struct {
		name     string
		st       semState
		free     int
		blockers int
		mismatch bool
	}{
		{"all free", semState{slots: make([]slotView, 3)}, 0, 0, false},
		{"lowest free", semState{slots: []slotView{{lock: kv(1, three)}, {}, {}}}, 1, 1, false},
		{"tombstone blocks", semState{slots: []slotView{{tomb: kv(1, value{})}, {lock: kv(2, three)}, {}}}, 2, 2, false},
		{"mutex waiter blocks", semState{slots: []slotView{{queued: kv(1, value{})}, {lock: kv(2, three)}, {lock: kv(3, three)}}}, -1, 3, false},
		{"controller grant (no count)", semState{slots: []slotView{{lock: kv(1, value{Holder: "pod"})}, {}, {}}}, 1, 1, false},
		{"holder of another count", semState{slots: []slotView{{lock: kv(1, value{Holder: "h", Slots: 4})}, {}, {}}}, 1, 1, true},
		{"slot beyond n", semState{slots: make([]slotView, 3), above: []*mvccpb.KeyValue{kv(1, value{Holder: "pod"})}}, 0, 0, true},
		{"waiter ahead of another count", semState{slots: make([]slotView, 3), pred: kv(1, value{Holder: "w", Slots: 2})}, 0, 0, true},
		{"oldest waiter of another count", semState{slots: make([]slotView, 3), oldest: kv(1, value{Holder: "w", Slots: 2})}, 0, 0, true},
		{"waiter ahead of the same count", semState{slots: make([]slotView, 3), pred: kv(1, three)}, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.st.freeSlot(); got != tc.free {
				t.Errorf("freeSlot() = %d, want %d", got, tc.free)
			}
			if got := len(tc.st.blockers()); got != tc.blockers {
				t.Errorf("len(blockers()) = %d, want %d", got, tc.blockers)
			}
			err := tc.st.mismatch("sem", 3)
			if got := err != nil; got != tc.mismatch || (err != nil && !errors.Is(err, ErrInvalid)) {
				t.Errorf("mismatch(3) = %v, want an ErrInvalid: %v", err, tc.mismatch)
			}
		})
	}
	mine := semState{slots: []slotView{{lock: kv(1, three)}, {lock: kv(2, value{Holder: "me", Call: "c1", Slots: 3})}}}
	if got := mine.mine(value{Holder: "me", Call: "c1", Slots: 3}.encode(), 7); got != 1 {
		t.Errorf("mine() = %d, want 1", got)
	}
	if got := mine.mine(value{Holder: "me", Call: "c1", Slots: 3}.encode(), 8); got != -1 {
		t.Errorf("mine() on another lease = %d, want -1", got)
	}
}

// The op count that AcquireSlot checks against the engine's max txn ops is
// the read's.
func TestSemReadOps(t *testing.T) {
	e := &Engine{prefix: "/p"}
	for _, n := range []int{1, 3, MaxSlots} {
		for _, entry := range []string{"", "/p/semaphores/s/1"} {
			if got, want := len(e.semReads("s", n, entry, 5)), semReadOps(n); got != want {
				t.Errorf("len(semReads(n=%d, entry %q)) = %d, want semReadOps = %d", n, entry, got, want)
			}
		}
	}
}

// slotGuardsFit: etcd counts the most of a grant's compares, Then ops and
// Else ops (they do not add up), and checks the Else branch's nested
// transaction (the guards again) against what that left (review mx2, mx3):
// cmps+g <= maxOps, and 2g+cmps <= maxOps with guards. TestReviewMx3SlotGuardsMatchEtcd
// checks the same on an etcd of each limit.
func TestSlotGuardsFit(t *testing.T) {
	for _, tc := range []struct {
		g, cmps, maxOps int
		want            bool
	}{
		{0, waitSlotCmps, 128, true},
		{60, waitSlotCmps, 128, true},
		{61, waitSlotCmps, 128, false},
		{60, trySlotCmps, 128, true},
		{61, trySlotCmps, 128, false},
		{118, waitSlotCmps, 128, false}, // accepted before review mx2; etcd refused the grant
		{0, waitSlotCmps, 8, true},      // refused before review mx3 (the Then ops added to the compares)
		{0, trySlotCmps, 8, true},
		{1, trySlotCmps, 8, false},
		{0, waitSlotCmps, 9, true}, // refused before review mx3
		{1, waitSlotCmps, 9, false},
		{1, trySlotCmps, 9, true}, // 8 compares, and 1 left for the nested one
		{2, trySlotCmps, 9, false},
		{1, waitSlotCmps, 10, true}, // refused before review mx3
		{2, waitSlotCmps, 10, false},
		{2, waitSlotCmps, 12, true},
		{3, waitSlotCmps, 13, false},
		{3, trySlotCmps, 13, true},
		{0, waitSlotCmps, 7, false}, // below the engine's minimum: not even the compares
	} {
		if got := slotGuardsFit(tc.g, tc.cmps, tc.maxOps); got != tc.want {
			t.Errorf("slotGuardsFit(%d, %d, %d) = %v, want %v", tc.g, tc.cmps, tc.maxOps, got, tc.want)
		}
	}
}

// slotGuardsMost is the largest g that slotGuardsFit accepts, and every
// smaller g fits too.
func TestSlotGuardsMost(t *testing.T) {
	for _, cmps := range []int{trySlotCmps, waitSlotCmps} {
		for maxOps := 1; maxOps <= 300; maxOps++ {
			most := slotGuardsMost(cmps, maxOps)
			for g := 0; g <= maxOps+1; g++ {
				if fit := slotGuardsFit(g, cmps, maxOps); fit != (g <= most) {
					t.Fatalf("slotGuardsFit(%d, %d, %d) = %v, but slotGuardsMost(%d, %d) = %d", g, cmps, maxOps, fit, cmps, maxOps, most)
				}
			}
		}
	}
	if got := slotGuardsMost(waitSlotCmps, 128); got != 60 {
		t.Errorf("slotGuardsMost(%d, 128) = %d, want 60 (WithGuard's doc)", waitSlotCmps, got)
	}
}
