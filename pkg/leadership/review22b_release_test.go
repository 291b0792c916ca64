package leadership_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// TestReview22bReplacedReleaseLetsRestartedHolderLead: on a one-slot lock the holder-release
// annotation is what keeps a restarted process of the holder pod from leading the token an
// earlier process released (TestRestartedProcessDoesNotLeadReleasedToken), and the policy
// lets no one but the holder remove it. On a lock of two slots the shipped policy let the
// holder of the other slot replace it with its own release (5e3bd61; now refused). Then: slot 1's pod
// releases token 60 at shutdown (ReleaseOnStop), slot 0's pod releases its own term (the
// annotation now names slot 0's term), the controller has not acted yet, and slot 1's pod's
// container restarts: the new Elector reads slot 1 Held with token 60, finds no annotation
// naming it, and leads the released token. DESIGN.md: "a released token is never led again by
// that pod, including one whose release was observed on the lock".
func TestReview22bReplacedReleaseLetsRestartedHolderLead(t *testing.T) {
	ns := namespace(t)
	key := createLock(t, ns, "leader", 6)
	setSpecSlots(t, key, 2)
	pa, cfgA := podIdentity(t, ns)
	pb, cfgB := workerPodConfig(t, ns, "worker-1")
	waitPolicy(t, key)
	setStatus(t, key, held(pb.Name, pb.UID, 100, 6))
	setSlot(t, key, 1, held(pa.Name, pa.UID, 60, 6))

	el, err := leadership.New(leadership.Config{Config: cfgA, Namespace: ns, Lock: key.Name, Identity: pa.UID, Name: pa.Name,
		ReleaseOnStop: true, Callbacks: leadership.Callbacks{OnStartedLeading: func(ctx context.Context, _ int64) { <-ctx.Done() }}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	eventually(t, 10*time.Second, el.Valid, func() string { return "slot 1's pod never led token 60" })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	ra := lockv1.HolderReleaseValue(pa.UID, 60)
	if got := releaseOf(t, key); got != ra {
		t.Fatalf("annotation %q, want %q after slot 1's release at shutdown", got, ra)
	}

	// Slot 0's holder releases its own term over slot 1's release: before the fix the policy
	// admitted it; now only slot 1's holder may replace a release confirming its current term.
	rb := lockv1.HolderReleaseValue(pb.UID, 100)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, lockv1.AnnotationHolderRelease, rb)
	err = podClient(t, cfgB).Patch(t.Context(), &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
		client.RawPatch(types.MergePatchType, []byte(patch)))
	if err == nil || !strings.Contains(err.Error(), "confirms the end of another slot's current term") {
		t.Errorf("slot 0's release over slot 1's: %v, want refused (only slot 1's holder may replace it)", err)
	}

	// Slot 1's pod's container restarts: a new Elector, same pod identity, no memory.
	el2, err := leadership.New(leadership.Config{Config: cfgA, Namespace: ns, Lock: key.Name, Identity: pa.UID, Name: pa.Name,
		Callbacks: leadership.Callbacks{OnStartedLeading: func(ctx context.Context, _ int64) { <-ctx.Done() }}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan error, 1)
	go func() { done2 <- el2.Run(ctx2) }()
	defer func() {
		cancel2()
		if err := <-done2; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if el2.Valid() {
			t.Errorf("a new Elector of slot 1's pod leads token %d (slot %d), which an earlier process of the pod released; the annotation %q, set by slot 0's holder over that release, no longer says so",
				el2.Token(), el2.Slot(), releaseOf(t, key))
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
