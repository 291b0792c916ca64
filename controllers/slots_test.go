package controllers_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Fenced slots (issue 22) on a real API server and etcd: each slot is a term of its own,
// with its own etcd key, and a pod holds at most one slot.

// slotsHeldBy reports whether every slot below n is Held by a distinct pod.
func slotsHeld(n int32) func(*lockv1.DistributedLock) bool {
	return func(l *lockv1.DistributedLock) bool {
		seen := map[types.UID]bool{}
		for i := range n {
			v := l.Status.SlotView(i)
			if v.Phase != lockv1.PhaseHeld || seen[v.HolderUID] {
				return false
			}
			seen[v.HolderUID] = true
		}
		return true
	}
}

// slotKeyToken is the CreateRevision of slot i's etcd key (0 when absent).
func (f *fixture) slotKeyToken(name string, i int32) int64 {
	f.t.Helper()
	key := f.ns + "/" + name
	if i > 0 {
		key += fmt.Sprintf("/slot/%d", i)
	}
	h, err := f.engine.Inspect(bg(), key)
	if err != nil {
		f.t.Fatalf("inspect %s: %v", key, err)
	}
	return h.Token
}

func describeSlots(l *lockv1.DistributedLock) string {
	s := fmt.Sprintf("slotsHeld=%s", l.Status.SlotsHeld)
	for i := range l.Status.SlotCount() {
		v := l.Status.SlotView(i)
		s += fmt.Sprintf(" [%d %s %s %d]", i, v.Phase, v.Holder, v.FencingToken)
	}
	return s
}

func TestSlotsGrantOnePodEach(t *testing.T) {
	f := newFixture(t)
	for i := range 4 {
		f.pod(fmt.Sprintf("a-%d", i), "a")
		secondApart()
	}
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.Slots = 3 })
	l := f.waitFor("lock", 30*time.Second, "3 slots held by 3 pods", slotsHeld(3))
	for i, want := range []string{"a-0", "a-1", "a-2"} {
		v := l.Status.SlotView(int32(i))
		if v.Holder != want {
			t.Errorf("slot %d held by %s, want %s (OldestReady per free slot); %s", i, v.Holder, want, describeSlots(l))
		}
		if got := f.slotKeyToken("lock", int32(i)); got != v.FencingToken || v.FencingToken <= 0 || v.MaxFencingToken != v.FencingToken {
			t.Errorf("slot %d: etcd token %d, published %d (max %d); want equal and positive", i, got, v.FencingToken, v.MaxFencingToken)
		}
		if len(v.History) != 1 || v.History[0].Reason != lockv1.ReasonGranted {
			t.Errorf("slot %d history = %+v, want one Granted term", i, v.History)
		}
	}
	f.waitFor("lock", 10*time.Second, "slotsHeld 3/3", func(l *lockv1.DistributedLock) bool { return l.Status.SlotsHeld == "3/3" })
	if l.Status.EligibleCandidates != 4 {
		t.Errorf("eligibleCandidates = %d, want 4 (every candidate, holders of slots included)", l.Status.EligibleCandidates)
	}
}

// A slot's holder that terminates hands its slot to the pod holding none, at once, with a
// larger token; the other slots keep their terms.
func TestSlotsHandoff(t *testing.T) {
	f := newFixture(t)
	var pods []*corev1.Pod
	for i := range 4 {
		pods = append(pods, f.pod(fmt.Sprintf("a-%d", i), "a"))
		secondApart()
	}
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.Slots = 3; s.LockDelaySeconds = ptrTo[int32](600) })
	before := f.waitFor("lock", 30*time.Second, "3 slots held", slotsHeld(3))
	f.terminate(pods[1])
	f.deletePod(pods[1])
	after := f.waitFor("lock", 30*time.Second, "slot 1 held by a-3", func(l *lockv1.DistributedLock) bool {
		v := l.Status.SlotView(1)
		return v.Phase == lockv1.PhaseHeld && v.Holder == "a-3"
	})
	old, v := before.Status.SlotView(1), after.Status.SlotView(1)
	if v.FencingToken <= old.FencingToken {
		t.Errorf("slot 1 token after handoff = %d, want > %d", v.FencingToken, old.FencingToken)
	}
	if len(v.History) < 2 || v.History[1].Reason != lockv1.ReasonHolderTerminated || v.History[1].Holder != "a-1" {
		t.Errorf("slot 1 history = %+v, want a-1's term ended HolderTerminated", v.History)
	}
	for _, i := range []int32{0, 2} {
		if a, b := before.Status.SlotView(i), after.Status.SlotView(i); a.FencingToken != b.FencingToken || a.HolderUID != b.HolderUID {
			t.Errorf("slot %d changed from %s/%d to %s/%d, want kept", i, a.Holder, a.FencingToken, b.Holder, b.FencingToken)
		}
	}
}

// Lowering spec.slots ends the highest slots through Releasing and the lock delay, then
// removes them and their keys; raising it grants new slots, and slot 0 keeps its term
// throughout.
func TestSlotsShrinkAndGrow(t *testing.T) {
	f := newFixture(t)
	for i := range 4 {
		f.pod(fmt.Sprintf("a-%d", i), "a")
		secondApart()
	}
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](3) })
	one := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	if one.Status.SlotsHeld != "" || one.Status.Slots != nil {
		t.Errorf("one-slot lock: slotsHeld %q, slots %+v; want neither", one.Status.SlotsHeld, one.Status.Slots)
	}

	f.editLock("lock", func(l *lockv1.DistributedLock) { l.Spec.Slots = 3 })
	grown := f.waitFor("lock", 30*time.Second, "grown to 3 held slots", slotsHeld(3))
	if grown.Status.FencingToken != one.Status.FencingToken || grown.Status.Holder != "a-0" {
		t.Errorf("slot 0 after growing: %s/%d, want a-0/%d kept", grown.Status.Holder, grown.Status.FencingToken, one.Status.FencingToken)
	}

	shrunk := time.Now()
	f.editLock("lock", func(l *lockv1.DistributedLock) { l.Spec.Slots = 1 })
	rel := f.waitFor("lock", 10*time.Second, "slots 1, 2 Releasing", func(l *lockv1.DistributedLock) bool {
		return l.Status.SlotView(1).Phase == lockv1.PhaseReleasing && l.Status.SlotView(2).Phase == lockv1.PhaseReleasing
	})
	if c := heldReason(rel.Status.SlotView(2)); c != lockv1.ReasonSlotRemoved {
		t.Errorf("slot 2's Held condition reason = %q, want SlotRemoved", c)
	}
	gone := f.waitFor("lock", 20*time.Second, "slots 1, 2 removed", func(l *lockv1.DistributedLock) bool { return len(l.Status.Slots) == 0 })
	if waited := time.Since(shrunk); waited < 3*time.Second {
		t.Errorf("slots removed after %v, want at least the 3 s lock delay", waited)
	}
	if gone.Status.FencingToken != one.Status.FencingToken || gone.Status.SlotsHeld != "" {
		t.Errorf("after shrinking: slot 0 %s/%d slotsHeld %q, want a-0/%d and no slotsHeld", gone.Status.Holder, gone.Status.FencingToken, gone.Status.SlotsHeld, one.Status.FencingToken)
	}
	for _, i := range []int32{1, 2} {
		if tok := f.slotKeyToken("lock", i); tok != 0 {
			t.Errorf("slot %d's etcd key still holds token %d, want it deleted", i, tok)
		}
	}

	f.editLock("lock", func(l *lockv1.DistributedLock) { l.Spec.Slots = 2 })
	regrown := f.waitFor("lock", 30*time.Second, "grown again to 2", slotsHeld(2))
	if v := regrown.Status.SlotView(1); v.FencingToken <= grown.Status.SlotView(2).FencingToken {
		t.Errorf("slot 1's new token %d, want above every earlier slot token (%d)", v.FencingToken, grown.Status.SlotView(2).FencingToken)
	}

	// Deleting the lock ends every slot's term, then lets it go, with no key left.
	if err := k8s.Delete(bg(), regrown); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() bool {
		err := k8s.Get(bg(), objectKey(f.ns, "lock"), &lockv1.DistributedLock{})
		return apierrors.IsNotFound(err)
	}, func() string { return "lock not deleted: " + describeSlots(f.get("lock")) })
	for _, i := range []int32{0, 1} {
		if tok := f.slotKeyToken("lock", i); tok != 0 {
			t.Errorf("slot %d's etcd key holds token %d after the lock's deletion, want none", i, tok)
		}
	}
}

func heldReason(st lockv1.DistributedLockStatus) string {
	for _, c := range st.Conditions {
		if c.Type == lockv1.ConditionHeld {
			return c.Reason
		}
	}
	return ""
}
