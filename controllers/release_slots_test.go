package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestHolderReleaseOfSlot: on a lock of spec.slots 2, the shipped admission policy admits
// the release of slot 1's term from slot 1's holder (its pod-bound token), and the controller
// hands slot 1 over without the lock delay, slot 0 untouched; a pod holding no slot is
// refused, naming itself or a slot's term, and a slot's holder naming another slot's term.
func TestHolderReleaseOfSlot(t *testing.T) {
	f := newFixture(t)
	f.releaseSetup()
	clients := map[types.UID]client.Client{}
	names := map[types.UID]string{}
	for i := range 3 {
		p, c := f.workerPod(fmt.Sprintf("a-%d", i), "a")
		clients[p.UID], names[p.UID] = c, p.Name
		secondApart()
	}
	b, cb := f.workerPod("b-0", "b") // not a candidate: holds no slot
	l := f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.Slots = 2; s.LockDelaySeconds = new(int32(30)) })
	held := f.waitFor("lock", 30*time.Second, "2 slots held", slotsHeld(2))
	s0, s1 := held.Status.SlotView(0), held.Status.SlotView(1)
	c0, c1 := clients[s0.HolderUID], clients[s1.HolderUID]
	if c0 == nil || c1 == nil {
		t.Fatalf("slots held by pods the test did not make: %s", describeSlots(held))
	}

	for _, tc := range []struct {
		name string
		send func() error
		want string
	}{
		{"a pod holding no slot names itself", func() error {
			return setAnnotation(cb, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(b.UID, s1.FencingToken))
		}, fmt.Sprintf("the request comes from pod %s, but the holders of its slots are pods %s, %s", b.UID, s0.HolderUID, s1.HolderUID)},
		{"a pod holding no slot names slot 1's term", func() error {
			return setAnnotation(cb, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(s1.HolderUID, s1.FencingToken))
		}, fmt.Sprintf("the request comes from pod %s", b.UID)},
		{"slot 1's holder names slot 0's term", func() error {
			return setAnnotation(c1, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(s0.HolderUID, s0.FencingToken))
		}, fmt.Sprintf("does not name the term being held (%s/%d)", s1.HolderUID, s1.FencingToken)},
		{"slot 1's holder names an old token of its slot", func() error {
			return setAnnotation(c1, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(s1.HolderUID, s1.FencingToken-1))
		}, fmt.Sprintf("does not name the term being held (%s/%d)", s1.HolderUID, s1.FencingToken)},
		{"slot 0's holder names slot 1's term", func() error {
			return setAnnotation(c0, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(s1.HolderUID, s1.FencingToken))
		}, fmt.Sprintf("does not name the term being held (%s/%d)", s0.HolderUID, s0.FencingToken)},
	} {
		err := tc.send()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want a refusal containing %q", tc.name, err, tc.want)
		}
	}
	if got := f.get("lock"); got.Annotations[lockv1.AnnotationHolderRelease] != "" || !slotsHeld(2)(got) ||
		got.Status.SlotView(1).FencingToken != s1.FencingToken || got.Status.SlotView(0).FencingToken != s0.FencingToken {
		t.Fatalf("after the refusals: %s, annotations %v; want both terms untouched and no release", describeSlots(got), got.Annotations)
	}

	sent := time.Now()
	if err := setAnnotation(c1, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(s1.HolderUID, s1.FencingToken)); err != nil {
		t.Fatalf("slot 1's holder's own release refused: %v", err)
	}
	// 10 s is a third of the lock delay: a handoff that waited it fails here.
	next := f.waitFor("lock", 10*time.Second, "slot 1 held by the third pod before the lock delay", func(l *lockv1.DistributedLock) bool {
		v := l.Status.SlotView(1)
		return v.Phase == lockv1.PhaseHeld && v.HolderUID != s1.HolderUID && v.HolderUID != s0.HolderUID && v.HolderUID != ""
	})
	t.Logf("slot 1 handed from %s to %s %v after the release was admitted (lockDelay 30s)", names[s1.HolderUID],
		next.Status.SlotView(1).Holder, time.Since(sent).Round(time.Millisecond))
	v := next.Status.SlotView(1)
	if v.FencingToken <= s1.FencingToken {
		t.Errorf("slot 1's next token = %d, want above %d", v.FencingToken, s1.FencingToken)
	}
	if len(v.History) < 2 || v.History[1].Token != s1.FencingToken || v.History[1].Reason != lockv1.ReasonHolderReleased {
		t.Errorf("slot 1 history = %+v, want the term of token %d ended with %s", v.History, s1.FencingToken, lockv1.ReasonHolderReleased)
	}
	if w := next.Status.SlotView(0); w.HolderUID != s0.HolderUID || w.FencingToken != s0.FencingToken || w.Phase != lockv1.PhaseHeld {
		t.Errorf("slot 0 = %s/%d %s, want its term kept (%s/%d)", w.Holder, w.FencingToken, w.Phase, s0.Holder, s0.FencingToken)
	}
}
