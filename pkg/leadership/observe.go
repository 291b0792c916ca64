package leadership

import (
	"context"
	"fmt"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

const (
	// defaultLease stands for a lock's lease until a read shows it.
	defaultLease = lockv1.DefaultLeaseDurationSeconds * time.Second
	// minRetry and maxRetry bound the pause after a failed read or watch.
	minRetry = 100 * time.Millisecond
	maxRetry = 5 * time.Second
	// maxReadTimeout caps how long one read may take, so a long lease does not let a hung
	// request delay the next read by a third of it.
	maxReadTimeout = 30 * time.Second
	// watchTimeout asks the API server to end each watch after this long; the watch resumes
	// from its last resourceVersion.
	watchTimeout = 5 * time.Minute
)

// observation is one view of the lock: from a consistent read (read is true, sent is its send
// time, received the arrival of its answer, err is set when it failed) or from a watch event.
type observation struct {
	read     bool
	sent     instant
	received instant
	err      error
	// lock is the object seen; nil when a read found none.
	lock *lockv1.DistributedLock
	// deleted is true for a watch event reporting the lock's deletion (lock is its last state).
	deleted bool
}

// leaseOf is the lease a lock's status or spec declares, 0 when neither does.
func leaseOf(lock *lockv1.DistributedLock) time.Duration {
	if lock == nil {
		return 0
	}
	if s := lock.Status.TermLeaseSeconds; s > 0 {
		return time.Duration(s) * time.Second
	}
	return time.Duration(lock.Spec.LeaseDurationSeconds) * time.Second
}

// parseRV reads a resourceVersion as the number it is for etcd-backed storage (etcd's
// revision). The API server documents resourceVersions as opaque strings; this package relies
// on the etcd form to order observations, and orders by fencing token alone when a
// resourceVersion does not parse.
func parseRV(rv string) (uint64, bool) {
	n, err := strconv.ParseUint(rv, 10, 64)
	return n, err == nil
}

// get is the consistent read: a GET with resourceVersion unset, which the API server serves
// from etcd with a quorum read, on a client with no cache. It returns nil, nil when the lock
// does not exist.
func (e *Elector) get(ctx context.Context) (*lockv1.DistributedLock, error) {
	var lock lockv1.DistributedLock
	err := e.client.Get().
		Namespace(e.cfg.Namespace).
		Resource("distributedlocks").
		Name(e.cfg.Lock).
		Do(ctx).
		Into(&lock)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get distributedlock %s/%s: %w", e.cfg.Namespace, e.cfg.Lock, err)
	}
	return &lock, nil
}

// readLoop sends a consistent read at once, then every lease/3 after the previous send, and
// at once whenever readNow is signalled; after a failure it retries sooner. Each read may take
// up to lease/3 (at most 30 s). It returns when ctx ends.
func (e *Elector) readLoop(ctx context.Context, readNow <-chan struct{}, out chan<- observation) {
	period := defaultLease / 3
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-readNow:
		}
		sent := now()
		rctx, cancel := context.WithTimeout(ctx, min(period, maxReadTimeout))
		lock, err := e.get(rctx)
		received := now()
		cancel()
		if ctx.Err() != nil {
			return
		}
		next := retryAfter(period)
		if err == nil {
			if l := leaseOf(lock); l > 0 {
				period = l / 3
			}
			next = period - now().Sub(sent)
		}
		select {
		case out <- observation{read: true, sent: sent, received: received, lock: lock, err: err}:
		case <-ctx.Done():
			return
		}
		timer.Reset(max(next, 0))
	}
}

// retryAfter is the pause after a failed read: short, so a holder gets several tries before
// its deadline, yet never a busy loop.
func retryAfter(period time.Duration) time.Duration {
	return min(max(period/4, minRetry), time.Second)
}

// watchLoop watches the lock and sends each event, resuming from the last resourceVersion
// seen (or from the current state after a 410 Gone). Watch events only end terms and prompt
// reads. It returns when ctx ends.
func (e *Elector) watchLoop(ctx context.Context, out chan<- observation) {
	rv := ""
	pause := minRetry
	for ctx.Err() == nil {
		w, err := e.watch(ctx, rv)
		delivered := false
		if err == nil {
			rv, delivered, err = e.drain(ctx, w, rv, out)
			w.Stop()
		}
		if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			rv = "" // start again from the current state, which a new watch sends first
		}
		if err != nil {
			e.log().V(1).Info("watch failed", "error", err.Error())
		}
		if delivered {
			pause = minRetry
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(pause):
		}
		pause = min(2*pause, maxRetry)
	}
}

// watch opens a watch of the lock from rv ("" means: the current state first, then changes).
func (e *Elector) watch(ctx context.Context, rv string) (watch.Interface, error) {
	req := e.client.Get().
		Namespace(e.cfg.Namespace).
		Resource("distributedlocks").
		Param("watch", "true").
		Param("fieldSelector", "metadata.name="+e.cfg.Lock).
		Param("allowWatchBookmarks", "true").
		Param("timeoutSeconds", strconv.Itoa(int(watchTimeout/time.Second)))
	if rv != "" {
		req = req.Param("resourceVersion", rv)
	}
	w, err := req.Watch(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch distributedlock %s/%s: %w", e.cfg.Namespace, e.cfg.Lock, err)
	}
	return w, nil
}

// drain forwards w's events until it ends. It returns the resourceVersion to resume from,
// whether any event arrived, and the error the watch ended with (nil when it just closed).
func (e *Elector) drain(ctx context.Context, w watch.Interface, rv string, out chan<- observation) (string, bool, error) {
	delivered := false
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return rv, delivered, nil
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return rv, delivered, nil
		}
		delivered = true
		switch ev.Type {
		case watch.Error:
			return rv, delivered, fmt.Errorf("watch distributedlock %s/%s: %w", e.cfg.Namespace, e.cfg.Lock, apierrors.FromObject(ev.Object))
		case watch.Bookmark:
			if m, err := meta.Accessor(ev.Object); err == nil {
				rv = m.GetResourceVersion()
			}
			continue
		}
		lock, isLock := ev.Object.(*lockv1.DistributedLock)
		if !isLock {
			return rv, delivered, fmt.Errorf("watch distributedlock %s/%s: unexpected object %T", e.cfg.Namespace, e.cfg.Lock, ev.Object)
		}
		rv = lock.ResourceVersion
		select {
		case out <- observation{lock: lock, deleted: ev.Type == watch.Deleted}:
		case <-ctx.Done():
			return rv, delivered, nil
		}
	}
}
