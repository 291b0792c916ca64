package leadership_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/lockwarden/lockwarden/pkg/fence"
	"github.com/lockwarden/lockwarden/pkg/fence/writer"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// TestAbandonOnFenceRefusal: a term whose fence raise a resource refuses because another
// writer (this pod's previous process) presented the same token first is over for this
// process: the callback calls Abandon, the term ends at once without a release (even with
// ReleaseOnStop), the token is never led again, and readiness fails while the lock names this
// pod with it, Held or Releasing; the next token is led as usual.
func TestAbandonOnFenceRefusal(t *testing.T) {
	h := newHarness(t, 10)
	const uid = types.UID("uid-abandon")
	var res fence.Monotonic
	// The pod's previous process raised the fence with token 5 before it died.
	if err := res.Admit(writer.ID(string(uid), writer.NewIncarnation()), 5); err != nil {
		t.Fatal(err)
	}
	cfg := h.config("worker-0", uid)
	cfg.ReleaseOnStop = true
	var patches atomic.Int32
	cfg.Config.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPatch {
				patches.Add(1)
			}
			return next.RoundTrip(req)
		})
	})
	var el *leadership.Elector
	refusals := make(chan error, 4)
	start := cfg.Callbacks.OnStartedLeading
	cfg.Callbacks.OnStartedLeading = func(ctx context.Context, token int64) {
		if err := res.Admit(el.Writer(), token); err != nil {
			refusals <- err
			var se *fence.StaleError
			if errors.As(err, &se) && se.Current == token {
				el.Abandon(token)
			}
		}
		start(ctx, token)
	}
	el = h.run(t, cfg)
	if owner, _, err := writer.Parse(el.Writer()); err != nil || owner != string(uid) {
		t.Fatalf("Writer() = %q (%v), want %s/<incarnation>", el.Writer(), err, uid)
	}

	setStatus(t, h.key, held("worker-0", uid, 5, 10))
	h.rec.waitEvents(t, "holder(worker-0,5) start(5) stop")
	if err := <-refusals; !errors.Is(err, fence.ErrStale) {
		t.Fatalf("fence raise with token 5 = %v, want ErrStale (another writer)", err)
	}
	if el.Valid() || el.Token() != 0 || !el.ValidUntil().IsZero() {
		t.Errorf("after Abandon(5): Valid %v, Token %d, ValidUntil %v; want false, 0, zero", el.Valid(), el.Token(), el.ValidUntil())
	}
	eventually(t, 10*time.Second, func() bool { return errors.Is(el.ReadyzCheck(nil), leadership.ErrAbandoned) },
		func() string { return "ReadyzCheck = " + errString(el.ReadyzCheck(nil)) + ", want ErrAbandoned" })

	// Reads go on confirming the grant; the process never leads it again, and sends no
	// release, not even when asked.
	n := h.reads.okCount()
	h.waitReads(t, n+2)
	if err := el.Release(t.Context()); !errors.Is(err, leadership.ErrNotLeading) {
		t.Errorf("Release after Abandon = %v, want ErrNotLeading", err)
	}
	setStatus(t, h.key, releasing)
	h.waitReads(t, h.reads.okCount()+1)
	if !errors.Is(el.ReadyzCheck(nil), leadership.ErrAbandoned) {
		t.Errorf("ReadyzCheck while Releasing names the abandoned term = %v, want ErrAbandoned", el.ReadyzCheck(nil))
	}
	if n := patches.Load(); n != 0 {
		t.Errorf("%d PATCH requests (releases) sent, want none: an abandoned term is never released", n)
	}

	// The controller grants a new token: it is led as usual, and readiness recovers.
	setStatus(t, h.key, held("worker-0", uid, 7, 10))
	h.rec.waitEvents(t, "holder(worker-0,5) start(5) stop holder(worker-0,7) start(7)")
	eventually(t, 10*time.Second, func() bool { return el.Valid() && el.Token() == 7 && el.ReadyzCheck(nil) == nil },
		func() string { return "not leading token 7, or not ready: " + errString(el.ReadyzCheck(nil)) })
	if tok, w := res.Highest(); tok != 7 || w != el.Writer() {
		t.Errorf("fence = %d from %q, want 7 from %q", tok, w, el.Writer())
	}
	if strings.Contains(h.rec.String(), "start(5) stop holder(worker-0,5) start(5)") {
		t.Errorf("token 5 led again: %s", h.rec)
	}
}

// roundTripFunc is an http.RoundTripper.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
