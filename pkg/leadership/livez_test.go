package leadership_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// TestLivezCheck holds OnStoppedLeading after a term: ReadyzCheck fails after the stop budget,
// LivezCheck only after the stop budget plus the liveness timeout, and both pass again once
// the callback returned. LivezCheck passes before Run, while the pod does not lead, while it
// cannot reach the API server (ReadyzCheck fails then), and after Run returned.
func TestLivezCheck(t *testing.T) {
	const budget, timeout = 200 * time.Millisecond, 400 * time.Millisecond
	h := newHarness(t, 3)
	h.rec.stopGate = make(chan struct{})
	cfg := h.config("pod-a", "uid-a")
	cfg.StopBudget, cfg.LivenessTimeout = budget, timeout
	el, err := leadership.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := el.LivezCheck(nil); err != nil {
		t.Errorf("LivezCheck() before Run = %v, want nil", err)
	}
	r := startRun(t, h, el.Run)
	t.Cleanup(func() {
		select {
		case <-h.rec.stopGate:
		default:
			close(h.rec.stopGate)
		}
	})
	h.waitReads(t, 1)
	if err := el.LivezCheck(nil); err != nil {
		t.Errorf("LivezCheck() while not leading = %v, want nil", err)
	}
	setStatus(t, h.key, held("pod-a", "uid-a", 10, 3))
	h.rec.waitEvents(t, "holder(pod-a,10) start(10)")

	ended := time.Now() // the term ends after this
	setStatus(t, h.key, releasing)
	h.rec.waitEvents(t, "holder(pod-a,10) start(10) stop")
	var unready, dead time.Time
	var livezErr error
	eventually(t, 5*time.Second, func() bool {
		at := time.Now()
		if unready.IsZero() && el.ReadyzCheck(nil) != nil {
			unready = at
		}
		if livezErr = el.LivezCheck(nil); livezErr != nil {
			dead = at
		}
		return livezErr != nil
	}, func() string { return "LivezCheck() = nil while OnStoppedLeading overruns, want an error" })
	if dead.Before(ended.Add(budget + timeout)) {
		t.Errorf("LivezCheck() failed %v after the term ended, want not before %v (stop budget + liveness timeout)", dead.Sub(ended), budget+timeout)
	}
	if unready.IsZero() || !unready.Before(dead) {
		t.Errorf("ReadyzCheck() failed at %v, LivezCheck() at %v after the term ended; want readiness to fail first", unready.Sub(ended), dead.Sub(ended))
	}
	if !strings.Contains(livezErr.Error(), "liveness limit") {
		t.Errorf("LivezCheck() = %q, want it to name the liveness limit", livezErr)
	}
	close(h.rec.stopGate)
	eventually(t, 5*time.Second, func() bool { return el.LivezCheck(nil) == nil },
		func() string {
			return fmt.Sprintf("LivezCheck() after OnStoppedLeading returned = %v, want nil", el.LivezCheck(nil))
		})

	// Cut off from the API server: not ready (after L - margin), still live.
	h.proxy.SetMode(apiproxy.Refuse)
	eventually(t, 10*time.Second, func() bool { return el.ReadyzCheck(nil) != nil },
		func() string { return "ReadyzCheck() = nil with every request refused, want an error" })
	if err := el.LivezCheck(nil); err != nil {
		t.Errorf("LivezCheck() while the API server cannot be reached = %v, want nil", err)
	}
	h.proxy.SetMode(apiproxy.Pass)
	if r.returned() {
		t.Fatalf("Run returned before its context ended")
	}
}

// TestLivezCheckAfterRun: once Run has returned, LivezCheck passes (nothing can be pending)
// while ReadyzCheck fails.
func TestLivezCheckAfterRun(t *testing.T) {
	h := newHarness(t, 30)
	cfg := h.config("pod-a", "uid-a")
	cfg.SingleTerm = true
	el, err := leadership.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r := startRun(t, h, el.Run)
	setStatus(t, h.key, held("pod-a", "uid-a", 10, 30))
	h.rec.waitEvents(t, "holder(pod-a,10) start(10)")
	setStatus(t, h.key, releasing)
	r.waitReturn(t, "the end of its term")
	if err := el.LivezCheck(nil); err != nil {
		t.Errorf("LivezCheck() after Run returned = %v, want nil", err)
	}
	if err := el.ReadyzCheck(nil); err == nil {
		t.Errorf("ReadyzCheck() after Run returned = nil, want an error")
	}
}

// ExampleElector_LivezCheck serves LivezCheck as the livenessProbe and ReadyzCheck as the
// readinessProbe: a pod that cannot reach its lock turns unready, a pod whose work will not
// stop after its term is restarted.
func ExampleElector_LivezCheck() {
	el, err := leadership.New(leadership.Config{Config: &rest.Config{Host: "https://127.0.0.1:6443"},
		Namespace: "shop", Lock: "payments-leader", Identity: "1f0c7a52-0000-4000-8000-000000000001"})
	if err != nil {
		fmt.Println(err)
		return
	}
	probe := func(check func(*http.Request) error) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if err := check(r); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		}
	}
	mux := http.NewServeMux()
	mux.Handle("/livez", probe(el.LivezCheck))
	mux.Handle("/readyz", probe(el.ReadyzCheck))

	// Before Run: live (nothing to stop), not ready (not electing).
	for _, path := range []string{"/livez", "/readyz"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Println(path, rec.Code)
	}
	// Output:
	// /livez 200
	// /readyz 503
}
