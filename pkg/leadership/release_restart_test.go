package leadership_test

import (
	"context"
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// TestRestartedProcessDoesNotLeadReleasedToken: a pod's process releases its term at
// shutdown (ReleaseOnStop); the container restarts in the same pod (same UID) and its new
// Elector reads the lock before the controller has ended the term: status still says Held
// with the released token, and the annotation on the same object says it was released. The
// new Elector must not lead that token (the controller ends it without the lock delay), and
// it stays ready, as for any term it does not lead. (Review 2 of issue 13: it led it.)
func TestRestartedProcessDoesNotLeadReleasedToken(t *testing.T) {
	ns := namespace(t)
	key := createLock(t, ns, "leader", 6)
	pod, podCfg := podIdentity(t, ns)
	waitPolicy(t, key)
	setStatus(t, key, held(pod.Name, pod.UID, 40, 6))
	w := &slowWorker{t: t, key: key, stopTakes: 100 * time.Millisecond}
	el, err := leadership.New(leadership.Config{Config: podCfg, Namespace: ns, Lock: key.Name, Identity: pod.UID, Name: pod.Name,
		ReleaseOnStop: true, Callbacks: leadership.Callbacks{OnStartedLeading: w.run}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	eventually(t, 10*time.Second, el.Valid, func() string { return "never led token 40" })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if got, want := releaseOf(t, key), lockv1.HolderReleaseValue(pod.UID, 40); got != want {
		t.Fatalf("annotation %q, want %q", got, want)
	}

	// the restarted container: a new Elector, same pod identity
	el2, err := leadership.New(leadership.Config{Config: podCfg, Namespace: ns, Lock: key.Name, Identity: pod.UID, Name: pod.Name,
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
	// A change the new Elector reads while the status still says Held with token 40.
	setStatus(t, key, func(s *lockv1.DistributedLockStatus) { s.ObservedGeneration++ })
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if el2.Valid() {
			t.Errorf("a new Elector of the same pod leads token %d, whose release is on the lock (%s)", el2.Token(), releaseOf(t, key))
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := el2.ReadyzCheck(nil); err != nil {
		t.Errorf("ReadyzCheck of the restarted process = %v, want nil (ready, as for a term it does not lead)", err)
	}
}
