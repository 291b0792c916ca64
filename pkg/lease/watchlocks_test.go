package lease_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// watchRecorder runs WatchLocks in a goroutine and records what it reports.
type watchRecorder struct {
	mu      sync.Mutex
	changed []string
	resyncs int
	cancel  context.CancelFunc
	errc    chan error
}

func startWatch(t *testing.T, eng *lease.Engine) *watchRecorder {
	t.Helper()
	c, cancel := context.WithCancel(context.Background())
	r := &watchRecorder{cancel: cancel, errc: make(chan error, 1)}
	go func() {
		r.errc <- eng.WatchLocks(c,
			func(key string) { r.mu.Lock(); r.changed = append(r.changed, key); r.mu.Unlock() },
			func() { r.mu.Lock(); r.resyncs++; r.mu.Unlock() })
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends the watch and checks that it returned ctx's error.
func (r *watchRecorder) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("WatchLocks = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WatchLocks did not return after its context ended")
	}
}

func (r *watchRecorder) snapshot() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.changed...), r.resyncs
}

// started waits for the resync that follows the watch's confirmation.
func (r *watchRecorder) started(t *testing.T) {
	t.Helper()
	eventually(t, 5*time.Second, func() error {
		if _, n := r.snapshot(); n < 1 {
			return errors.New("no resync after the watch started")
		}
		return nil
	})
}

// waitFor polls until the recorded changes end with want.
func (r *watchRecorder) waitFor(t *testing.T, want ...string) {
	t.Helper()
	eventually(t, 10*time.Second, func() error {
		got, _ := r.snapshot()
		if len(got) < len(want) || fmt.Sprint(got[len(got)-len(want):]) != fmt.Sprint(want) {
			return fmt.Errorf("changed keys = %q, want them to end with %q", got, want)
		}
		return nil
	})
}

// One watch reports every put and delete of a lock key by name, and nothing
// for queue entries and tombstones.
func TestWatchLocks(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	eng := e.engine(e.cli)
	s := e.session(eng, ttl)
	r := startWatch(t, eng)
	r.started(t)

	a, err := s.Grant(ctx(t), "ns/a", "uid-a")
	if err != nil {
		t.Fatalf("Grant = %v, want nil", err)
	}
	r.waitFor(t, "ns/a")
	if err := eng.UpdateRecord(ctx(t), "ns/a", a, []byte(`{"phase":"Releasing"}`)); err != nil {
		t.Fatalf("UpdateRecord = %v, want nil", err)
	}
	r.waitFor(t, "ns/a", "ns/a")
	// A forced release deletes the key and puts a tombstone; a waiter puts a
	// queue entry, which becomes the grant after the lock-delay and goes with
	// its release. Only the lock key is reported.
	if err := eng.ForceRelease(ctx(t), "ns/a", a); err != nil {
		t.Fatalf("ForceRelease = %v, want nil", err)
	}
	res := make(chan error, 1)
	go func() {
		l, err := s.Acquire(ctx(t), "ns/a", "waiter")
		if err == nil {
			err = l.Release(ctx(t))
		}
		res <- err
	}()
	if err := <-res; err != nil {
		t.Fatalf("Acquire after the lock-delay = %v, want nil", err)
	}
	l, err := s.TryAcquire(ctx(t), "ns/a", "again")
	if err != nil {
		t.Fatalf("TryAcquire = %v, want nil", err)
	}
	if err := l.Release(ctx(t)); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	r.waitFor(t, "ns/a", "ns/a", "ns/a", "ns/a", "ns/a") // put, update, forced delete, try acquire, release
	r.stop(t)
	got, _ := r.snapshot()
	if fmt.Sprint(got) != "[ns/a ns/a ns/a ns/a ns/a]" {
		t.Fatalf("changed = %q, want ns/a five times and nothing else", got)
	}
}

// When the watch fails (here: its connection breaks and etcd compacted the
// revision it would resume from), WatchLocks calls resync and watches again:
// a change after the recovery is reported.
func TestWatchLocksResyncsAfterCompaction(t *testing.T) {
	const ttl = 2 * time.Second
	e := newEnv(t)
	p := etcdtest.NewProxy(t, e.srv.Endpoint())
	eng := e.engine(etcdtest.NewClient(t, []string{p.Endpoint()}))
	writer := e.engine(e.cli)
	s := e.session(writer, ttl)
	r := startWatch(t, eng)
	r.started(t)
	if _, err := s.Grant(ctx(t), "before", "h"); err != nil {
		t.Fatalf("Grant = %v, want nil", err)
	}
	r.waitFor(t, "before")
	_, before := r.snapshot()

	// From now on what etcd sends the watcher arrives as garbage: its
	// connection breaks at the next event, and every reconnection fails.
	p.Server().ModifyRx(func(b []byte) []byte { return bytes.Repeat([]byte{0xff}, len(b)) })
	if _, err := s.Grant(ctx(t), "during", "h"); err != nil {
		t.Fatalf("Grant = %v, want nil", err)
	}
	if _, err := s.Grant(ctx(t), "during2", "h"); err != nil {
		t.Fatalf("Grant = %v, want nil", err)
	}
	h := holding(t, writer, "during2")
	if _, err := e.cli.Compact(ctx(t), h.Revision); err != nil {
		t.Fatalf("Compact = %v, want nil", err)
	}
	time.Sleep(200 * time.Millisecond) // the garbled event has broken the connection
	p.Server().UnmodifyRx()
	// Two resyncs: one when the watch failed, one when its successor was
	// confirmed (a change in between shows in that re-read).
	eventually(t, 15*time.Second, func() error {
		if _, n := r.snapshot(); n < before+2 {
			return fmt.Errorf("resyncs = %d, want %d (failure, then the new watch)", n, before+2)
		}
		return nil
	})
	if _, err := s.Grant(ctx(t), "after", "h"); err != nil {
		t.Fatalf("Grant = %v, want nil", err)
	}
	r.waitFor(t, "after")
	r.stop(t)
}

// Compacted tells a compacted revision from a readable or future one.
func TestCompacted(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	var revs []int64
	for i := range 3 {
		resp, err := e.cli.Put(ctx(t), fmt.Sprintf("%s/x%d", prefix(t), i), "v")
		if err != nil {
			t.Fatalf("Put = %v, want nil", err)
		}
		revs = append(revs, resp.Header.Revision)
	}
	if _, err := e.cli.Compact(ctx(t), revs[1]); err != nil {
		t.Fatalf("Compact(%d) = %v, want nil", revs[1], err)
	}
	for _, tc := range []struct {
		rev  int64
		want bool
	}{
		{revs[0], true},
		{revs[1], false}, // the compaction revision itself stays readable
		{revs[2], false},
		{revs[2] + 1000, false},
	} {
		got, err := eng.Compacted(ctx(t), tc.rev)
		if err != nil || got != tc.want {
			t.Errorf("Compacted(%d) = %v, %v, want %v, nil", tc.rev, got, err, tc.want)
		}
	}
	if _, err := eng.Compacted(ctx(t), 0); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("Compacted(0) = %v, want ErrInvalid", err)
	}
}
