package leadership_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// TestReview22cDeferredReleaseOfReleasingTerm: review 22c of a9af7b6. ErrReleaseDeferred's
// contract: "The token stays released and the Elector sends the release again once that
// term has ended; nothing is lost". Release is documented for a Releasing term as well
// ("it releases the last term this pod led if the newest observation still names it (Held
// or Releasing)"), and a holder's release ends a Releasing term at once (DESIGN.md: an
// operator's request "only the holder's own release ends it sooner"; a crash's or a
// shrink's Releasing likewise). But the release is sent again only by judgeSlot's
// grantResend, which needs phase Held: a deferred release of a term that is (or becomes)
// Releasing is never sent, and the term waits the full lock delay although its holder
// confirmed its stop. A natural way in: spec.slots lowered by two, both removed slots
// Releasing (SlotRemoved) and both holders releasing (ReleaseOnStop); one is deferred.
func TestReview22cDeferredReleaseOfReleasingTerm(t *testing.T) {
	for _, tc := range []struct {
		name string
		// releasingFirst: slot 0's term is Releasing before its holder releases; else it
		// goes Releasing after the deferred release.
		releasingFirst bool
	}{
		{"released while Releasing", true},
		{"released while Held, then Releasing", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t)
			key := createLock(t, ns, "leader", 6)
			setSpecSlots(t, key, 2)
			pa, cfgA := podIdentity(t, ns)
			pb, cfgB := workerPodConfig(t, ns, "worker-1")
			waitPolicy(t, key)
			setStatus(t, key, held(pb.Name, pb.UID, 100, 6))
			setSlot(t, key, 1, held(pa.Name, pa.UID, 60, 6))
			run := func(pod *corev1.Pod, cfg *rest.Config) (*leadership.Elector, func()) {
				el, err := leadership.New(leadership.Config{Config: cfg, Namespace: ns, Lock: key.Name, Identity: pod.UID, Name: pod.Name})
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- el.Run(ctx) }()
				return el, func() {
					cancel()
					if err := <-done; err != nil {
						t.Errorf("Run = %v, want nil", err)
					}
				}
			}
			ea, stopA := run(pa, cfgA)
			defer stopA()
			eb, stopB := run(pb, cfgB)
			defer stopB()
			eventually(t, 10*time.Second, func() bool { return ea.Valid() && eb.Valid() }, func() string { return "both slots not led" })
			if err := ea.Release(t.Context()); err != nil {
				t.Fatalf("slot 1's release = %v, want nil", err)
			}
			if tc.releasingFirst {
				setStatus(t, key, releasing) // e.g. an operator's release-request, or a shrink's SlotRemoved
				eventually(t, 10*time.Second, func() bool { return !eb.Valid() }, func() string { return "slot 0's pod leads a Releasing term" })
			}
			if err := eb.Release(t.Context()); !errors.Is(err, leadership.ErrReleaseDeferred) {
				t.Fatalf("slot 0's release while slot 1's confirms its current term = %v, want ErrReleaseDeferred", err)
			}
			if !tc.releasingFirst {
				setStatus(t, key, releasing)
			}
			// The controller's part: slot 1's term ends (its annotation is left naming it).
			setSlot(t, key, 1, func(s *lockv1.DistributedLockStatus) {
				s.Phase, s.Holder, s.HolderUID, s.FencingToken = lockv1.PhasePending, "", "", 0
			})
			rb := lockv1.HolderReleaseValue(pb.UID, 100)
			deadline := time.Now().Add(10 * time.Second)
			for releaseOf(t, key) != rb && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if got := releaseOf(t, key); got != rb {
				t.Errorf("annotation %q 10s after slot 1's term ended, want %q: slot 0's deferred release of its Releasing term (token 100) was never sent, "+
					"so that term waits the full lock delay though ErrReleaseDeferred promised the release goes out once the other term ends", got, rb)
			}
			if eb.Valid() {
				t.Errorf("slot 0's pod leads token 100, which it released")
			}
		})
	}
}

// TestReview22cPolicyPaths: review 22c of a9af7b6, the paths of the shipped policy on a lock
// of three slots that TestSlotReleasePolicy does not take (sound on a9af7b6): the holder
// withdraws its own current release; the operator's release-request beside a current
// release; a stale release naming another slot's ended term, replaced by a slot holder or
// removed by a pod holding no slot; a pod whose old release names slot 1 now holding slot 2.
func TestReview22cPolicyPaths(t *testing.T) {
	ns := namespace(t)
	key := createLock(t, ns, "leader", 6)
	setSpecSlots(t, key, 3)
	p0, cfg0 := podIdentity(t, ns)
	c0 := podClient(t, cfg0)
	p1, c1 := workerPodIn(t, ns, "worker-1")
	_, c2 := workerPodIn(t, ns, "worker-2") // holds no slot
	waitPolicy(t, key)
	setStatus(t, key, held(p1.Name, p1.UID, 100, 6))
	setSlot(t, key, 1, held(p0.Name, p0.UID, 60, 6))
	patch := func(c client.Client, annotations string) error {
		return c.Patch(t.Context(), &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
			client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{`+annotations+`}}}`)))
	}
	annotate := func(c client.Client, v string) error {
		return patch(c, fmt.Sprintf("%q:%q", lockv1.AnnotationHolderRelease, v))
	}
	remove := func(c client.Client) error { return patch(c, fmt.Sprintf("%q:null", lockv1.AnnotationHolderRelease)) }
	r0, r1, r0s2 := lockv1.HolderReleaseValue(p0.UID, 60), lockv1.HolderReleaseValue(p1.UID, 100), lockv1.HolderReleaseValue(p0.UID, 70)
	endSlot := func(i int32) func() error {
		return func() error {
			setSlot(t, key, i, func(s *lockv1.DistributedLockStatus) {
				s.Phase, s.Holder, s.HolderUID, s.FencingToken = lockv1.PhasePending, "", "", 0
			})
			return nil
		}
	}
	steps := []struct {
		name string
		send func() error
		want string // "" admitted, else a part of the refusal
		left string
	}{
		{"slot 1's holder releases", func() error { return annotate(c0, r0) }, "", r0},
		{"the operator's release-request beside it", func() error { return patch(k8s, fmt.Sprintf("%q:%q", lockv1.AnnotationReleaseRequest, "100")) }, "", r0},
		{"slot 1's holder withdraws its own current release", func() error { return remove(c0) }, "", ""},
		{"slot 1's holder releases again", func() error { return annotate(c0, r0) }, "", r0},
		{"slot 1's term ends (the controller)", endSlot(1), "", r0},
		{"slot 0's holder replaces the stale release of slot 1's ended term", func() error { return annotate(c1, r1) }, "", r1},
		{"a pod holding no slot removes slot 0's current release", func() error { return remove(c2) }, "only the holder pod may remove or change it", r1},
		{"slot 1's old holder, now granted slot 2", func() error { setSlot(t, key, 2, held(p0.Name, p0.UID, 70, 6)); return nil }, "", r1},
		{"it releases slot 2 over slot 0's current release", func() error { return annotate(c0, r0s2) }, "confirms the end of another slot's current term", r1},
		{"it names its ended slot 1 term", func() error { return annotate(c0, r0) }, "does not name the term being held", r1},
		{"slot 0's term ends (the controller)", endSlot(0), "", r1},
		{"slot 2's holder releases over the stale one", func() error { return annotate(c0, r0s2) }, "", r0s2},
		{"slot 2's term ends (the controller)", endSlot(2), "", r0s2},
		{"a pod holding no slot removes the stale release", func() error { return remove(c2) }, "", ""},
	}
	for _, s := range steps {
		err := s.send()
		switch {
		case s.want == "" && err != nil:
			t.Errorf("%s: %v, want admitted", s.name, err)
		case s.want != "" && (err == nil || !strings.Contains(err.Error(), s.want)):
			t.Errorf("%s: err = %v, want a refusal containing %q", s.name, err, s.want)
		}
		if got := releaseOf(t, key); got != s.left {
			t.Errorf("after %s: annotation %q, want %q", s.name, got, s.left)
		}
	}
}
