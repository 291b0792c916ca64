package controllers

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// The slot cases of the term rules (issue 22), without an API server: a slot turn decides on
// slotView's one-slot lock with slotCandidates' pods, as gather builds them, and stores its
// status with storeSlot for the next slot's turn.

// slotLockOf is a lock of n slots whose status holds the given terms, by slot: pod name and
// token (the pod's UID is "uid-" + name), Held.
func slotLockOf(n int32, terms map[int32]slotTerm) *lockv1.DistributedLock {
	l := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "l", UID: "lock-uid"}}
	l.Spec = lockv1.DistributedLockSpec{LeaseDurationSeconds: 10, LockDelaySeconds: new(int32(lockDly)), Strategy: lockv1.StrategyOldestReady, Slots: n}
	l.Status.ControllerEpoch = 5
	for i, term := range terms {
		v := l.Status.SlotView(i)
		v.Phase, v.Holder, v.HolderUID, v.FencingToken, v.MaxFencingToken, v.TermLeaseSeconds = term.phase(), term.pod, types.UID("uid-"+term.pod), term.token, term.token, 10
		v.History = []lockv1.Term{{Holder: term.pod, HolderUID: types.UID("uid-" + term.pod), Token: term.token, Reason: lockv1.ReasonGranted}}
		l.Status.SetSlot(i, v, false)
	}
	return l
}

type slotTerm struct {
	pod       string
	token     int64
	releasing bool
}

func (s slotTerm) phase() lockv1.Phase {
	if s.releasing {
		return lockv1.PhaseReleasing
	}
	return lockv1.PhaseHeld
}

// slotInput is the input of slot i's turn: its view, its candidates, its key (g, the
// published term's key when the slot has a term).
func slotInput(real *lockv1.DistributedLock, i int32, pods []corev1.Pod) (input, *slotTurn) {
	v, s := slotView(real, i)
	in := input{
		spec: &v.Spec, status: &v.Status, uid: v.UID, epoch: 5, rev: 1000, fresh: true,
		pods: slotCandidates(pods, s.others), selector: labels.Everything(),
	}
	s.into(&in)
	if st := in.status; st.HolderUID != "" {
		in.g = grant{holderUID: st.HolderUID, token: st.FencingToken, rec: record{Name: st.Holder, Phase: st.Phase, Strategy: lockv1.StrategyOldestReady, LeaseSeconds: 10,
			Containers: []containerMark{{Name: "app", ID: "containerd://app-0"}}}}
		for k := range in.pods {
			if in.pods[k].UID == st.HolderUID {
				in.holder.pod = &in.pods[k]
			}
		}
		if in.holder.pod == nil {
			for k := range pods {
				if pods[k].UID == st.HolderUID {
					in.holder.pod = &pods[k]
				}
			}
		}
	}
	return in, s
}

func slotPods(names ...string) []corev1.Pod {
	var pods []corev1.Pod
	for k, n := range names {
		p := testPod(n, created(int64(k+1)))
		p.UID = types.UID("uid-" + n)
		p.Status.ContainerStatuses[0].ContainerID = "containerd://app-0"
		pods = append(pods, *p)
	}
	return pods
}

// grantSlot stores a grant of slot i to pod with token as the slot's turn would publish it.
func grantSlot(real *lockv1.DistributedLock, s *slotTurn, in *input, pod *corev1.Pod, token int64) *lockv1.DistributedLock {
	st := in.status.DeepCopy()
	publishGrant(st, pod.Name, grant{holderUID: pod.UID, token: token, rec: record{LeaseSeconds: 10}}, 1, lockv1.ReasonGranted, metav1.Now())
	s.real = real
	l, _ := storeSlot(s, st, true)
	return l
}

func TestDecideSlots(t *testing.T) {
	pods := slotPods("a", "b", "c", "d")

	t.Run("grow: new slots are granted to pods holding no slot, one each", func(t *testing.T) {
		real := slotLockOf(3, map[int32]slotTerm{0: {pod: "a", token: 100}})
		if n := slotCount(real, "ns/l", nil); n != 3 {
			t.Fatalf("slotCount = %d, want 3", n)
		}
		in, s := slotInput(real, 1, pods)
		d := decide(&in)
		if d.verb != actGrant || d.next == nil || d.next.Name != "b" {
			t.Fatalf("slot 1: decide = %+v, want grant to b (a holds slot 0)", d)
		}
		real = grantSlot(real, s, &in, d.next, 110)
		in, _ = slotInput(real, 2, pods)
		d = decide(&in)
		if d.verb != actGrant || d.next == nil || d.next.Name != "c" {
			t.Fatalf("slot 2: decide = %+v, want grant to c (a, b hold slots 0, 1)", d)
		}
		if real.Status.SlotsHeld != "2/3" {
			t.Errorf("slotsHeld = %q, want 2/3 before slot 2's write", real.Status.SlotsHeld)
		}
	})

	t.Run("two slots freed in one turn go to two pods", func(t *testing.T) {
		// b (slot 1) and c (slot 2) were deleted; both Releasing terms are past the lock delay,
		// and the turns of slots 1 and 2 run one after the other on what the previous one
		// stored.
		real := slotLockOf(3, map[int32]slotTerm{0: {pod: "a", token: 100}, 1: {pod: "b", token: 101, releasing: true}, 2: {pod: "c", token: 102, releasing: true}})
		var next []string
		for i := int32(1); i <= 2; i++ {
			in, s := slotInput(real, i, slotPods("a", "d", "e"))
			in.holder = evidence{gone: true}
			in.g.rec.Phase = lockv1.PhaseReleasing
			in.clocks.releasing = lockDly * time.Second
			d := decide(&in)
			if d.verb != actEnd || d.next == nil {
				t.Fatalf("slot %d: decide = %+v, want end and grant", i, d)
			}
			next = append(next, d.next.Name)
			st := in.status.DeepCopy()
			publishEnd(st, d.reason, metav1.Now())
			publishGrant(st, d.next.Name, grant{holderUID: d.next.UID, token: 200 + int64(i), rec: record{LeaseSeconds: 10}}, 1, lockv1.ReasonGranted, metav1.Now())
			s.real = real
			real, _ = storeSlot(s, st, true)
		}
		if next[0] != "d" || next[1] != "e" {
			t.Errorf("slots 1, 2 granted to %v, want [d e]", next)
		}
		if real.Status.HeldSlot("uid-d") != 1 || real.Status.HeldSlot("uid-e") != 2 || real.Status.SlotsHeld != "3/3" {
			t.Errorf("status = %+v, want d in slot 1, e in slot 2, 3/3", real.Status)
		}
	})

	t.Run("a pod eligible for two slots gets one", func(t *testing.T) {
		real := slotLockOf(3, map[int32]slotTerm{0: {pod: "a", token: 100}})
		two := slotPods("a", "b")
		in, s := slotInput(real, 1, two)
		d := decide(&in)
		if d.verb != actGrant || d.next.Name != "b" {
			t.Fatalf("slot 1: decide = %+v, want grant to b", d)
		}
		real = grantSlot(real, s, &in, d.next, 110)
		in, _ = slotInput(real, 2, two)
		if d := decide(&in); d.verb != actWait {
			t.Errorf("slot 2: decide = %+v, want wait: b holds slot 1 and a slot 0", d)
		}
	})

	t.Run("an unpublished grant to a pod holding another slot is discarded", func(t *testing.T) {
		real := slotLockOf(3, map[int32]slotTerm{0: {pod: "a", token: 100}, 1: {pod: "b", token: 101}})
		in, _ := slotInput(real, 2, pods)
		in.g = grant{holderUID: "uid-b", token: 105, rec: record{Name: "b", Phase: lockv1.PhaseHeld, Lock: "lock-uid"}}
		if d := decide(&in); d.verb != actDiscard {
			t.Errorf("slot 2 with b's unpublished grant: decide = %+v, want discard (b holds slot 1)", d)
		}
		in.g.holderUID, in.g.rec.Name = "uid-c", "c"
		if d := decide(&in); d.verb != actAdopt {
			t.Errorf("slot 2 with c's unpublished grant: decide = %+v, want adopt", d)
		}
	})

	t.Run("shrink: the highest slots end through Releasing and the delay, then leave", func(t *testing.T) {
		real := slotLockOf(1, map[int32]slotTerm{0: {pod: "a", token: 100}, 1: {pod: "b", token: 101}, 2: {pod: "c", token: 102, releasing: true}})
		if n := slotCount(real, "ns/l", nil); n != 3 {
			t.Fatalf("slotCount = %d, want 3 (slots 1 and 2 still listed)", n)
		}
		in, _ := slotInput(real, 0, pods)
		if d := decide(&in); d.verb != actWait {
			t.Errorf("slot 0: decide = %+v, want wait (kept)", d)
		}
		in, _ = slotInput(real, 1, pods)
		if d := decide(&in); d.verb != actRelease || d.reason != lockv1.ReasonSlotRemoved {
			t.Errorf("slot 1 (removed, Held): decide = %+v, want release for SlotRemoved", d)
		}
		in, _ = slotInput(real, 2, pods)
		in.g.rec.Phase = lockv1.PhaseReleasing
		in.clocks.releasing = lockDly * time.Second
		d := decide(&in)
		if d.verb != actEnd || d.next != nil {
			t.Fatalf("slot 2 (removed, Releasing past the delay): decide = %+v, want end granting no one", d)
		}
		_, s := slotView(real, 2)
		st := in.status.DeepCopy()
		publishEnd(st, lockv1.ReasonSlotRemoved, metav1.Now())
		st.Phase = lockv1.PhaseSuspended
		if kept, dropped := storeSlot(s, st, true); kept.Status.SlotCount() != 3 || dropped {
			t.Errorf("slot 2 stored with its key present: %d slots (dropped %v), want it still listed", kept.Status.SlotCount(), dropped)
		}
		real, dropped := storeSlot(s, st, false)
		if real.Status.SlotCount() != 2 || real.Status.HeldSlot("uid-c") != -1 || !dropped {
			t.Errorf("after slot 2 ended: %+v, want slot 2 gone", real.Status.Slots)
		}
		if real.Status.SlotsHeld != "1/1" {
			t.Errorf("slotsHeld = %q, want 1/1 (slot 1 is being removed)", real.Status.SlotsHeld)
		}
		in, _ = slotInput(real, 1, pods)
		in.holder = evidence{gone: true}
		if d := decide(&in); d.verb != actRelease || d.reason != lockv1.ReasonHolderGone {
			t.Errorf("slot 1 (removed, holder gone): decide = %+v, want release for HolderGone", d)
		}
	})

	t.Run("a removed slot without a term grants nothing", func(t *testing.T) {
		real := slotLockOf(2, map[int32]slotTerm{0: {pod: "a", token: 100}})
		in, _ := slotInput(real, 2, pods)
		if d := decide(&in); d.verb != actSuspend {
			t.Errorf("slot 2 of a 2-slot lock: decide = %+v, want suspend (then removed)", d)
		}
	})
}

func TestSlotKeys(t *testing.T) {
	if k := slotKey("ns/l", 0); k != "ns/l" {
		t.Errorf("slotKey(0) = %q, want the lock's key", k)
	}
	if k := slotKey("ns/l", 3); k != "ns/l/slot/3" {
		t.Errorf("slotKey(3) = %q", k)
	}
	for key, want := range map[string]string{"ns/l": "ns l", "ns/l/slot/3": "ns l", "ns/l/other/3": "", "_controller": "", "ns/": ""} {
		ns, name, ok := keyLock(key)
		got := ""
		if ok {
			got = ns + " " + name
		}
		if got != want {
			t.Errorf("keyLock(%q) = %q, want %q", key, got, want)
		}
	}
	for slot, want := range map[string]int32{"ns/l/slot/3": 3, "ns/l/slot/0": -1, "ns/l/slot/03": -1, "ns/l/slot/16": -1, "ns/lx/slot/3": -1, "ns/l/slot/x": -1} {
		if got := slotIndex("ns/l", slot); got != want {
			t.Errorf("slotIndex(%q) = %d, want %d", slot, got, want)
		}
	}
	real := slotLockOf(2, nil)
	if n := slotCount(real, "ns/l", []string{"ns/l/slot/5"}); n != 6 {
		t.Errorf("slotCount with a key of slot 5 = %d, want 6", n)
	}
}
