package leadership_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// ended is a Run (or RunOrDie) in progress; done is closed when it has returned, with err.
type ended struct {
	done chan struct{}
	err  error
}

// startRun calls run in a goroutine with a context that the test's cleanup cancels; cleanup
// then waits for it (10 s) and checks that no two callbacks ran at once.
func startRun(t *testing.T, h *harness, run func(context.Context) error) *ended {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &ended{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		h.proxy.SetMode(apiproxy.Pass)
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return 10s after its context was cancelled")
		}
		if h.rec.overlap.Load() {
			t.Errorf("two callbacks ran at once; calls: %s", h.rec)
		}
	})
	return r
}

// waitReturn waits until the Run of r has returned by itself, and checks it returned nil.
func (r *ended) waitReturn(t *testing.T, why string) {
	t.Helper()
	select {
	case <-r.done:
		if r.err != nil {
			t.Errorf("Run = %v, want nil", r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Run did not return within 10s of %s", why)
	}
}

// returned reports whether the Run of r has returned.
func (r *ended) returned() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// TestSingleTermStopsAfterFirstTerm ends the first term each way a term ends: Run returns by
// itself after OnStoppedLeading, which is called exactly once, and no second term starts
// (the new token or holder is neither reported nor led).
func TestSingleTermStopsAfterFirstTerm(t *testing.T) {
	tests := []struct {
		name  string
		lease int32
		end   func(t *testing.T, h *harness, el *leadership.Elector, cancel context.CancelFunc)
	}{
		{"Releasing", 30, func(t *testing.T, h *harness, _ *leadership.Elector, _ context.CancelFunc) {
			setStatus(t, h.key, releasing)
		}},
		{"new token", 30, func(t *testing.T, h *harness, _ *leadership.Elector, _ context.CancelFunc) {
			setStatus(t, h.key, held("pod-a", "uid-a", 12, 30))
		}},
		{"another holder", 30, func(t *testing.T, h *harness, _ *leadership.Elector, _ context.CancelFunc) {
			setStatus(t, h.key, held("pod-b", "uid-b", 12, 30))
		}},
		{"deadline passed", 3, func(t *testing.T, h *harness, _ *leadership.Elector, _ context.CancelFunc) {
			h.proxy.SetMode(apiproxy.Hold)
		}},
		{"Release", 30, func(t *testing.T, _ *harness, el *leadership.Elector, _ context.CancelFunc) {
			// The API server may refuse it (no pod identity here): Run ends all the same.
			if err := el.Release(t.Context()); errors.Is(err, leadership.ErrNotLeading) || errors.Is(err, leadership.ErrNotRunning) {
				t.Errorf("Release() = %v, want the term released (or the API server's answer)", err)
			}
		}},
		{"Run's context ended", 30, func(_ *testing.T, _ *harness, _ *leadership.Elector, cancel context.CancelFunc) { cancel() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, tt.lease)
			cfg := h.config("pod-a", "uid-a")
			cfg.SingleTerm = true
			el, err := leadership.New(cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			r := startRun(t, h, func(context.Context) error { return el.Run(ctx) })
			t.Cleanup(cancel)
			h.waitReads(t, 1)
			setStatus(t, h.key, held("pod-a", "uid-a", 10, tt.lease))
			h.rec.waitEvents(t, "holder(pod-a,10) start(10)")
			tt.end(t, h, el, cancel)
			r.waitReturn(t, "the end of the first term")
			h.proxy.SetMode(apiproxy.Pass)
			if got, want := h.rec.String(), "holder(pod-a,10) start(10) stop"; got != want {
				t.Errorf("callbacks: got %q, want %q", got, want)
			}
			if el.Valid() {
				t.Errorf("Valid() after Run returned = true, want false")
			}
		})
	}
}

// TestSingleTermReleasesBeforeReturning: with ReleaseOnStop, the release of the first term is
// on the lock when Run returns by itself (the API server admits it for the pod's own token).
func TestSingleTermReleasesBeforeReturning(t *testing.T) {
	ns := namespace(t)
	key := createLock(t, ns, "leader", 6)
	pod, podCfg := podIdentity(t, ns)
	waitPolicy(t, key)
	setStatus(t, key, held(pod.Name, pod.UID, 40, 6))
	w := &slowWorker{t: t, key: key, stopTakes: 300 * time.Millisecond}
	stops := 0
	el, err := leadership.New(leadership.Config{Config: podCfg, Namespace: ns, Lock: key.Name, Identity: pod.UID, Name: pod.Name,
		SingleTerm: true, ReleaseOnStop: true,
		Callbacks: leadership.Callbacks{OnStartedLeading: w.run, OnStoppedLeading: func() { stops++ }}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	eventually(t, 10*time.Second, el.Valid, func() string { return "the pod never led token 40" })
	setStatus(t, key, releasing)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Run did not return within 10s of Releasing")
	}
	if want := lockv1.HolderReleaseValue(pod.UID, 40); releaseOf(t, key) != want {
		t.Errorf("when Run returned: annotation %q, want %q", releaseOf(t, key), want)
	}
	if !w.returned.Load() || stops != 1 {
		t.Errorf("when Run returned: OnStartedLeading returned %v, OnStoppedLeading called %d times; want true, 1", w.returned.Load(), stops)
	}
	if v := w.early.Load(); v != nil {
		t.Errorf("the release %v was on the lock while OnStartedLeading still ran", v)
	}
}

// TestStopWithoutTerm: a Run that never led and whose context ends calls OnStoppedLeading
// once with SingleTerm (client-go's contract) and never without it (unchanged behaviour).
func TestStopWithoutTerm(t *testing.T) {
	for _, tt := range []struct {
		singleTerm bool
		want       string
	}{{false, "holder(pod-b,5)"}, {true, "holder(pod-b,5) stop"}} {
		t.Run(fmt.Sprintf("SingleTerm=%v", tt.singleTerm), func(t *testing.T) {
			h := newHarness(t, 3) // a read every second
			setStatus(t, h.key, held("pod-b", "uid-b", 5, 3))
			cfg := h.config("pod-a", "uid-a")
			cfg.SingleTerm = tt.singleTerm
			el, err := leadership.New(cfg)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			r := startRun(t, h, func(context.Context) error { return el.Run(ctx) })
			h.rec.waitEvents(t, "holder(pod-b,5)")
			h.waitReads(t, 2)
			if r.returned() {
				t.Fatalf("Run returned before its context ended, without a term")
			}
			cancel()
			r.waitReturn(t, "its context ended")
			if got := h.rec.String(); got != tt.want {
				t.Errorf("callbacks: got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestSingleTermSkippedTermDoesNotCount: a term that starts and ends while OnNewHolder still
// runs is led (Valid) but its OnStartedLeading is never called, so it is not Run's one term:
// the pod campaigns on, leads the next grant, and Run returns when that term ends.
func TestSingleTermSkippedTermDoesNotCount(t *testing.T) {
	h := newHarness(t, 30)
	gate := make(chan struct{})
	cfg := h.config("pod-a", "uid-a")
	cfg.SingleTerm = true
	onNewHolder := cfg.Callbacks.OnNewHolder
	cfg.Callbacks.OnNewHolder = func(holder string, token int64) {
		onNewHolder(holder, token)
		if token == 10 {
			<-gate
		}
	}
	el, err := leadership.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r := startRun(t, h, el.Run)
	t.Cleanup(func() {
		select {
		case <-gate:
		default:
			close(gate)
		}
	})
	h.waitReads(t, 1)
	setStatus(t, h.key, held("pod-a", "uid-a", 10, 30))
	eventually(t, 10*time.Second, func() bool { return el.Token() == 10 },
		func() string { return fmt.Sprintf("Token() = %d while OnNewHolder runs, want 10", el.Token()) })
	setStatus(t, h.key, releasing)
	eventually(t, 10*time.Second, func() bool { return !el.Valid() }, func() string { return "Valid() after Releasing = true, want false" })
	close(gate)

	setStatus(t, h.key, held("pod-a", "uid-a", 12, 30))
	h.rec.waitEvents(t, "holder(pod-a,10) holder(pod-a,12) start(12)")
	if r.returned() {
		t.Fatalf("Run returned after a skipped term")
	}
	setStatus(t, h.key, releasing)
	r.waitReturn(t, "the end of its first started term")
	if got, want := h.rec.String(), "holder(pod-a,10) holder(pod-a,12) start(12) stop"; got != want {
		t.Errorf("callbacks: got %q, want %q", got, want)
	}
}
