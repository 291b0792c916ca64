package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// rewatchPause is how long WatchLocks waits after a failed watch before it
// watches again, so that a failing etcd is not asked in a tight loop.
const rewatchPause = 200 * time.Millisecond

// WatchLocks watches every lock key under the prefix with ONE etcd watch
// (from the current revision, WithRequireLeader) and calls changed(key) for
// each put or delete of a lock key, until ctx ends (then it returns ctx's
// error). When the watch fails or is compacted, it calls resync() (the caller
// re-reads everything) and watches again after a short pause. It runs in the
// caller's goroutine; it starts none that outlive it.
//
// resync is called when a watch ends with an error and again each time a
// watch has been confirmed by etcd, including the first: a change between the caller's last read and the start
// of the watch then shows in the caller's re-read, so none is missed. The
// watch only hastens what the caller learns; decisions still read
// linearizably (Inspect). changed and resync run in the caller's goroutine
// and delay the watch while they run. Queue entries and tombstones are not
// reported, so neither is a blocking Acquire's grant, which is its queue
// entry (owner.go): WatchLocks is for locks taken with Grant or TryAcquire,
// as the controller's are. An invalid engine option is returned at once.
func (e *Engine) WatchLocks(ctx context.Context, changed func(key string), resync func()) error {
	return e.watchLockEvents(ctx, func(dir string, ev *clientv3.Event) {
		changed(strings.TrimPrefix(string(ev.Kv.Key), dir))
	}, resync)
}

// watchLockEvents is the loop of WatchLocks and WatchLockChanges: it calls changed with each
// event of a lock key and the keys' directory.
func (e *Engine) watchLockEvents(ctx context.Context, changed func(dir string, ev *clientv3.Event), resync func()) error {
	if e.err != nil {
		return fmt.Errorf("watch locks: %w", e.err)
	}
	return watchLoop(ctx, e.cli, e.Path(""), changed, resync)
}

// watchLoop watches every key under dir (WatchLocks' loop, shared with Global.Watch): one
// watch at a time, resync on every confirmed watch and after every failed one, a short pause
// before watching again, until ctx ends; then it returns ctx's error.
func watchLoop(ctx context.Context, cli *clientv3.Client, dir string, changed func(dir string, ev *clientv3.Event), resync func()) error {
	for {
		// The watch's own error says why it ended; the caller's remedy is the
		// same for every reason (re-read, watch again), so it is not returned.
		_ = watchOnce(ctx, cli, dir, changed, resync)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		resync()
		t := time.NewTimer(rewatchPause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// watchOnce runs one watch of the keys under dir until it fails or ctx
// ends, and returns why it ended.
func watchOnce(ctx context.Context, cli *clientv3.Client, dir string, changed func(string, *clientv3.Event), resync func()) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ch := cli.Watch(wctx, dir, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	for wr := range ch {
		if wr.Created {
			resync()
		}
		for _, ev := range wr.Events {
			changed(dir, ev)
		}
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watch %s: %w", dir, err)
		}
		if wr.Canceled {
			return fmt.Errorf("watch %s: canceled", dir)
		}
	}
	return fmt.Errorf("watch %s: closed", dir)
}

// Compacted reports whether etcd's history at revision rev is compacted away
// (ErrCompacted -> true; a future revision or a readable one -> false; other
// errors returned). It reads one key's count at rev, linearizably.
func (e *Engine) Compacted(ctx context.Context, rev int64) (bool, error) {
	if e.err != nil {
		return false, fmt.Errorf("compacted %d: %w", rev, e.err)
	}
	if rev <= 0 {
		return false, fmt.Errorf("compacted %d: %w", rev, invalidf("revision %d is not positive", rev))
	}
	_, err := e.cli.Get(ctx, e.Path(""), clientv3.WithRev(rev), clientv3.WithCountOnly())
	switch {
	case err == nil, errors.Is(err, rpctypes.ErrFutureRev):
		return false, nil
	case errors.Is(err, rpctypes.ErrCompacted):
		return true, nil
	}
	return false, fmt.Errorf("compacted %d: %w", rev, err)
}
