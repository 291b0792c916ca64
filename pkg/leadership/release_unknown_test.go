package leadership_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// patchFault fails the first n PATCH requests with a transport error: after the API server
// answered (applied, the answer lost) or without sending them (lost on the way). Either way
// the elector sees the same error and cannot tell whether the release was applied.
type patchFault struct {
	next    http.RoundTripper
	applied bool // send the request, then lose the answer
	left    atomic.Int32
}

func (f *patchFault) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPatch || f.left.Add(-1) < 0 {
		return f.next.RoundTrip(req)
	}
	if f.applied {
		resp, err := f.next.RoundTrip(req)
		if err == nil {
			resp.Body.Close()
		}
	}
	return nil, errors.New("connection reset by peer (injected)")
}

// WrappedRoundTripper lets client-go close the idle connections of the transport underneath.
func (f *patchFault) WrappedRoundTripper() http.RoundTripper { return f.next }

// TestReleaseOutcomeUnknown: a release whose patch gets no answer keeps the token released
// (it is never led again, although a read shows the term still Held), and an observation of
// the term without the annotation sends the release again, once per observation.
func TestReleaseOutcomeUnknown(t *testing.T) {
	for _, applied := range []bool{true, false} {
		name := map[bool]string{true: "applied, answer lost", false: "lost before the server"}[applied]
		t.Run(name, func(t *testing.T) {
			ns := namespace(t)
			key := createLock(t, ns, "leader", 6)
			pod, podCfg := podIdentity(t, ns)
			waitPolicy(t, key)
			setStatus(t, key, held(pod.Name, pod.UID, 40, 6))
			fault := &patchFault{applied: applied}
			fault.left.Store(1)
			cfg := rest.CopyConfig(podCfg)
			cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { fault.next = rt; return fault }
			el, err := leadership.New(leadership.Config{Config: cfg, Namespace: ns, Lock: key.Name, Identity: pod.UID, Name: pod.Name,
				Callbacks: leadership.Callbacks{OnStartedLeading: func(ctx context.Context, _ int64) { <-ctx.Done() }}})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- el.Run(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run = %v", err)
				}
			}()
			eventually(t, 10*time.Second, el.Valid, func() string { return "never led token 40" })
			if err := el.Release(t.Context()); err == nil {
				t.Fatalf("Release with its answer lost = nil, want the transport error")
			}
			want := lockv1.HolderReleaseValue(pod.UID, 40)
			// A change the elector reads while the status still says Held with token 40.
			setStatus(t, key, func(s *lockv1.DistributedLockStatus) { s.ObservedGeneration++ })
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				if el.Valid() {
					t.Fatalf("token 40 is led again after a release whose outcome is unknown (annotation %q)", releaseOf(t, key))
				}
				time.Sleep(10 * time.Millisecond)
			}
			if got := releaseOf(t, key); got != want {
				t.Errorf("annotation %q, want %q (sent again while the term was Held without it)", got, want)
			}
			// applied: the one lost answer; lost: the lost patch and at least one sent again.
			if got, want := 1-fault.left.Load(), map[bool]int32{true: 1, false: 2}[applied]; got < want {
				t.Errorf("%d PATCH requests, want at least %d", got, want)
			}
		})
	}
}
