package leadership_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/lockwarden/lockwarden/pkg/fence/writer"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// termWriters is what one OnStartedLeading call saw of its writer.
type termWriters struct {
	token            int64
	fromCtx, current string
	ctx              context.Context
}

// TestWriterPerTerm: every term presents a writer of its own. The first term of the process
// presents the process's incarnation (writer.Of, also Writer() before Run); a later term a
// fresh one. Inside OnStartedLeading, Writer() and WriterOf(ctx) agree; after a later term
// started, the earlier term's context still names the earlier writer.
func TestWriterPerTerm(t *testing.T) {
	h := newHarness(t, 10)
	const uid = types.UID("uid-writers")
	cfg := h.config("worker-0", uid)
	var (
		mu   sync.Mutex
		seen []termWriters
		elp  atomic.Pointer[leadership.Elector]
	)
	start := cfg.Callbacks.OnStartedLeading
	cfg.Callbacks.OnStartedLeading = func(ctx context.Context, token int64) {
		mu.Lock()
		seen = append(seen, termWriters{token: token, fromCtx: leadership.WriterOf(ctx), current: elp.Load().Writer(), ctx: ctx})
		mu.Unlock()
		start(ctx, token)
	}
	el := h.run(t, cfg)
	elp.Store(el)
	before := el.Writer() // no term yet: the lock has no holder
	if before != writer.Of(string(uid)) {
		t.Errorf("Writer() before any term = %q, want the process's %q", before, writer.Of(string(uid)))
	}

	setStatus(t, h.key, held("worker-0", uid, 5, 10))
	h.rec.waitEvents(t, "holder(worker-0,5) start(5)")
	setStatus(t, h.key, held("worker-0", uid, 7, 10))
	h.rec.waitEvents(t, "holder(worker-0,5) start(5) stop holder(worker-0,7) start(7)")

	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("%d OnStartedLeading calls, want 2", len(seen))
	}
	for _, s := range seen {
		if s.fromCtx != s.current {
			t.Errorf("term %d: WriterOf(ctx) = %q, Writer() = %q: want the same", s.token, s.fromCtx, s.current)
		}
		if owner, _, err := writer.Parse(s.fromCtx); err != nil || owner != string(uid) {
			t.Errorf("term %d: writer %q (%v), want %s/<incarnation>", s.token, s.fromCtx, err, uid)
		}
	}
	if seen[0].fromCtx != before {
		t.Errorf("first term's writer %q, want the process's %q", seen[0].fromCtx, before)
	}
	if seen[1].fromCtx == seen[0].fromCtx {
		t.Errorf("terms 5 and 7 both present writer %q, want one each", seen[0].fromCtx)
	}
	if got := leadership.WriterOf(seen[0].ctx); got != seen[0].fromCtx {
		t.Errorf("after term 7 started, term 5's context names writer %q, want %q", got, seen[0].fromCtx)
	}
	if got := el.Writer(); got != seen[1].fromCtx {
		t.Errorf("Writer() during term 7 = %q, want %q", got, seen[1].fromCtx)
	}
	if got := leadership.WriterOf(context.Background()); got != "" {
		t.Errorf("WriterOf(a context of no term) = %q, want \"\"", got)
	}
}

// TestResourceLockWriterPerLeadership: the ResourceLock draws a writer each time client-go
// becomes leader with it (its "became leader" event, before the manager starts the
// leader-election runnables): the first time the process's, then a fresh one.
func TestResourceLockWriterPerLeadership(t *testing.T) {
	const uid = "uid-rl-writers"
	l, err := leadership.NewResourceLock(leadership.ResourceLockConfig{Config: &rest.Config{Host: "https://127.0.0.1:1"},
		Namespace: "ns", Lock: "op", Identity: uid, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	before := l.Writer()
	if before != writer.Of(uid) {
		t.Errorf("Writer() before leading = %q, want the process's %q", before, writer.Of(uid))
	}
	l.RecordEvent("became leader")
	first := l.Writer()
	if first != before {
		t.Errorf("first leadership's writer %q, want the process's %q", first, before)
	}
	l.RecordEvent("stopped leading")
	if l.Writer() != first {
		t.Errorf("Writer() changed when client-go stopped leading: %q, want %q until it leads again", l.Writer(), first)
	}
	l.RecordEvent("became leader")
	second := l.Writer()
	if owner, _, err := writer.Parse(second); err != nil || owner != uid || second == first {
		t.Errorf("second leadership's writer %q (%v), want %s/<a new incarnation>, not %q", second, err, uid, first)
	}
}
