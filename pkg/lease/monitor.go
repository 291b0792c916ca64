package lease

import (
	"context"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// monitor is the lock's goroutine, owned by the lock and joined by the
// session's WaitGroup (and by Release). It ends the lock when its validity
// passes (a timer, checked against the clock by Valid) or when a watch on the
// key shows it deleted or replaced; it returns when the lock ends.
//
// It starts watchDelay after the lock was confirmed (register arms a timer;
// finish disarms it if the lock ended first, so a lock released within the
// delay costs no goroutine, no watch stream, no watch create and cancel).
// Its watch starts at fromRev, the revision after the one the lock was
// confirmed at, so no change is missed: a change during the delay is
// replayed from etcd's history (after etcd's catch-up of unsynced watches,
// at most 100 ms later). Validity never depended on the watch, and a lock's
// validity is at least TTL - margin (over a second) when the delay ends.
//
// If the watch fails (compaction, no leader, a closed stream) the monitor
// asks the session for an ownership check at once, which covers the gap, and
// watches again from the current revision. The watch only ever shortens
// validity, and nothing waits for it: clientv3's Watch returns only once
// etcd confirms the watch, which a stalled connection may never do, so it is
// started by a helper goroutine the monitor owns and joins.
func (l *Lock) monitor(fromRev int64) {
	defer l.s.wg.Done()
	defer close(l.exited)

	timer := time.NewTimer(l.untilDeadline())
	defer timer.Stop()
	var retry <-chan time.Time // non-nil while waiting to watch again

	var helpers sync.WaitGroup
	defer helpers.Wait()
	w := l.startWatch(&helpers, clientv3.WithRev(fromRev))
	defer func() { w.cancel() }()

	for {
		select {
		case <-l.done:
			return
		case <-timer.C:
			if !l.Valid() {
				return
			}
			timer.Reset(l.untilDeadline())
		case <-retry:
			retry = nil
			w = l.startWatch(&helpers)
			l.s.requestCheck()
		case w.ch = <-w.started:
			w.started = nil
		case wr, ok := <-w.ch:
			if !ok || wr.Canceled || wr.Err() != nil {
				// Re-read through a check and watch again after a pause, so
				// that a failing watch does not spin.
				w.cancel()
				w = lockWatch{cancel: func() {}}
				l.s.requestCheck()
				retry = time.After(l.s.retryDelay())
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == mvccpb.DELETE || !l.held(ev.Kv) {
					l.lose(errKeyGone)
					return
				}
			}
		}
	}
}

// watchDelay is how long after its confirmation a lock starts its monitor.
// It delays the detection of a deletion in a lock's first moments by at
// most this much; validity never depended on the watch.
const watchDelay = 50 * time.Millisecond

// lockWatch is one watch of the lock key: started delivers its channel once
// etcd confirmed it, then ch is set; cancel ends it.
type lockWatch struct {
	started chan clientv3.WatchChan
	ch      clientv3.WatchChan
	cancel  context.CancelFunc
}

// startWatch starts a watch of the lock key in a helper goroutine tracked
// by helpers. With WithRequireLeader, a member cut off from the leader
// cancels the watch instead of leaving it silently stalled.
func (l *Lock) startWatch(helpers *sync.WaitGroup, opts ...clientv3.OpOption) lockWatch {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(l.ctx))
	w := lockWatch{started: make(chan clientv3.WatchChan, 1), cancel: cancel}
	helpers.Go(func() { w.started <- l.s.cli.Watch(ctx, l.path, opts...) })
	return w
}

// untilDeadline returns the time left until the lock's validity ends.
func (l *Lock) untilDeadline() time.Duration {
	l.s.mu.Lock()
	vu := l.validUntilLocked()
	l.s.mu.Unlock()
	return max(vu.Sub(now()), 0)
}
