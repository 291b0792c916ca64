package leadership

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// slotStatus is a status whose slot 0 is s0 and whose other slots are rest.
func slotStatus(s0 lockv1.SlotStatus, rest ...lockv1.SlotStatus) lockv1.DistributedLockStatus {
	return lockv1.DistributedLockStatus{Phase: s0.Phase, HolderUID: s0.HolderUID, FencingToken: s0.FencingToken,
		MaxFencingToken: s0.MaxFencingToken, Slots: rest}
}

func slotTermOf(i int32, phase lockv1.Phase, uid types.UID, token, maxToken int64) lockv1.SlotStatus {
	return lockv1.SlotStatus{Index: i, Phase: phase, HolderUID: uid, FencingToken: token, MaxFencingToken: maxToken}
}

// TestSlotOf checks which slot an observation is judged by for pod "me".
func TestSlotOf(t *testing.T) {
	const me, other types.UID = "me", "other"
	held, rel := lockv1.PhaseHeld, lockv1.PhaseReleasing
	tests := []struct {
		name string
		st   lockv1.DistributedLockStatus
		want int32
	}{
		{"one-slot lock held by me", slotStatus(slotTermOf(0, held, me, 5, 5)), 0},
		{"one-slot lock held by another", slotStatus(slotTermOf(0, held, other, 5, 5)), 0},
		{"no status", lockv1.DistributedLockStatus{}, 0},
		{"slot 2 held by me", slotStatus(slotTermOf(0, held, other, 9, 9), slotTermOf(1, held, "x", 7, 7), slotTermOf(2, held, me, 3, 3)), 2},
		{"no slot names me: slot 0", slotStatus(slotTermOf(0, held, other, 9, 9), slotTermOf(1, held, "x", 7, 7)), 0},
		{"slot 1 Releasing for me", slotStatus(slotTermOf(0, held, other, 9, 9), slotTermOf(1, rel, me, 7, 7)), 1},
		{"Held before Releasing", slotStatus(slotTermOf(0, rel, me, 9, 9), slotTermOf(3, held, me, 11, 11)), 3},
		{"two Held: the lowest", slotStatus(slotTermOf(0, held, other, 9, 9), slotTermOf(1, held, me, 7, 7), slotTermOf(2, held, me, 8, 8)), 1},
		{"a gap in the slots", slotStatus(slotTermOf(0, held, other, 9, 9), slotTermOf(4, held, me, 8, 8)), 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := slotOf(&tt.st, me); got != tt.want {
				t.Errorf("slotOf = %d, want %d", got, tt.want)
			}
		})
	}
	if got := slotOf(&tests[0].st, ""); got != 0 {
		t.Errorf("slotOf(no identity) = %d, want 0", got)
	}
}

// TestStale checks per-slot token ordering: each slot by its own tokens, slot 0 always,
// other slots only when the resourceVersion does not order the observation.
func TestStale(t *testing.T) {
	held, free := lockv1.PhaseHeld, lockv1.PhasePending
	seen := map[int32]int64{0: 100, 1: 60}
	tests := []struct {
		name  string
		st    lockv1.DistributedLockStatus
		newer bool
		want  bool
	}{
		{"same tokens", slotStatus(slotTermOf(0, held, "a", 100, 100), slotTermOf(1, held, "b", 60, 60)), false, false},
		{"slot 1 below slot 0's max is not stale", slotStatus(slotTermOf(0, held, "a", 100, 100), slotTermOf(1, held, "b", 60, 60)), true, false},
		{"slot 0 max lower", slotStatus(slotTermOf(0, held, "a", 90, 90), slotTermOf(1, held, "b", 60, 60)), true, true},
		{"slot 0 Held below its max seen", slotStatus(slotTermOf(0, held, "a", 90, 100), slotTermOf(1, held, "b", 60, 60)), true, true},
		{"slot 0 Pending below its max seen", slotStatus(slotTermOf(0, free, "", 90, 100), slotTermOf(1, held, "b", 60, 60)), true, false},
		{"slot 1 max lower, not ordered", slotStatus(slotTermOf(0, held, "a", 100, 100), slotTermOf(1, held, "b", 50, 50)), false, true},
		{"slot 1 Held below its max seen, not ordered", slotStatus(slotTermOf(0, held, "a", 100, 100), slotTermOf(1, held, "b", 50, 60)), false, true},
		{"slot 1 listed again at a newer resourceVersion", slotStatus(slotTermOf(0, held, "a", 100, 100), slotTermOf(1, held, "b", 50, 50)), true, false},
		{"slot 1 no longer listed", slotStatus(slotTermOf(0, held, "a", 100, 100)), false, false},
		{"a slot not seen before", slotStatus(slotTermOf(0, held, "a", 100, 100), slotTermOf(1, held, "b", 60, 60), slotTermOf(2, held, "c", 5, 5)), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := stale(&tt.st, seen, tt.newer); got != tt.want {
				t.Errorf("stale = %v, want %v", got, tt.want)
			}
		})
	}
	if stale(&tests[0].st, nil, false) {
		t.Errorf("stale with nothing seen = true, want false")
	}
}

// TestSlotTokens checks the highest tokens kept per slot: raised, slots no longer listed
// forgotten.
func TestSlotTokens(t *testing.T) {
	st := slotStatus(slotTermOf(0, lockv1.PhaseHeld, "a", 100, 100), slotTermOf(2, lockv1.PhaseHeld, "c", 40, 45))
	got := slotTokens(&st, map[int32]int64{0: 120, 1: 60, 2: 30})
	want := map[int32]int64{0: 120, 2: 45}
	if len(got) != len(want) || got[0] != want[0] || got[2] != want[2] {
		t.Errorf("slotTokens = %v, want %v", got, want)
	}
}

// TestJudgeSlot checks judge by one slot's view: its token against its own max, and the
// holder-release annotation naming that slot's term.
func TestJudgeSlot(t *testing.T) {
	const me types.UID = "me"
	view := func(token, maxToken int64) *lockv1.DistributedLockStatus {
		return &lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, HolderUID: me, FencingToken: token, MaxFencingToken: maxToken}
	}
	lock := func(release string) *lockv1.DistributedLock {
		l := &lockv1.DistributedLock{Status: lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, HolderUID: "other", FencingToken: 100, MaxFencingToken: 100}}
		if release != "" {
			l.Annotations = map[string]string{lockv1.AnnotationHolderRelease: release}
		}
		return l
	}
	lockWithSlot := func(release string) *lockv1.DistributedLock {
		l := lock(release)
		l.Status.Slots = []lockv1.SlotStatus{slotTermOf(2, lockv1.PhaseHeld, "third", 40, 40)}
		return l
	}
	tests := []struct {
		name     string
		lock     *lockv1.DistributedLock
		view     *lockv1.DistributedLockStatus
		released int64
		want     grant
	}{
		{"slot's token at its max", lock(""), view(60, 60), 0, grantLead},
		{"slot's token below its own max", lock(""), view(60, 70), 0, grantNone},
		{"annotation names the slot's term", lock(lockv1.HolderReleaseValue(me, 60)), view(60, 60), 0, grantReleased},
		{"annotation names slot 0's token", lock(lockv1.HolderReleaseValue(me, 100)), view(60, 60), 0, grantLead},
		{"released in memory, annotation another slot's current term: wait", lock(lockv1.HolderReleaseValue("other", 100)), view(60, 60), 60, grantReleased},
		{"released in memory, annotation another slot's old term", lock(lockv1.HolderReleaseValue("other", 99)), view(60, 60), 60, grantResend},
		{"released in memory, annotation another slot's current term, slot 2", lockWithSlot(lockv1.HolderReleaseValue("third", 40)), view(60, 60), 60, grantReleased},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := judgeSlot(tt.lock, tt.view, me, tt.released, 0); got != tt.want {
				t.Errorf("judgeSlot = %v, want %v", got, tt.want)
			}
		})
	}
}
