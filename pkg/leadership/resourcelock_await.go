package leadership

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/watch"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// A standby learns of its grant from a watch, not at its next poll. client-go's elector polls
// a lock it does not hold: Get, then (the record naming another holder) a pause of RetryPeriod
// to 2.2 x RetryPeriod (JitterFactor 1.2), then Get again. So while client-go is not leading,
// Get first waits on a watch of the lock until an event shows it granted to this pod, for at
// most RetryPeriod (or the call's context), and only then sends its consistent read, which
// decides as before: a watch event never confirms a term. A grant that lands while Get waits
// is led within one watch delivery and one GET; one that lands during client-go's pause is
// seen at once by the next Get (the watch starts with the lock's current state).

// awaitGrant waits, while client-go is not leading with this lock, until a watch event shows
// the lock granted to this pod under a token it may lead (and any wait-out of a lost term is
// over), or RetryPeriod passes (a quarter of the read limit at most, so that readiness keeps
// its reads), or ctx ends. It writes nothing; a watch that cannot be opened or ends returns at
// once, and Get reads as client-go's poll would.
func (l *ResourceLock) awaitGrant(ctx context.Context) {
	if l.renewing.Load() {
		return
	}
	l.mu.Lock()
	bound := min(l.cfg.RetryPeriod, l.limit/4)
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	w, err := l.e.watch(ctx, "")
	if err != nil {
		return
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error || ev.Type == watch.Deleted {
				return
			}
			lock, isLock := ev.Object.(*lockv1.DistributedLock)
			if !isLock || judge(inClusterView(lock), l.cfg.Identity, l.e.released.load(lineageOf(lock)), l.e.abandoned.load(lineageOf(lock))) != grantLead {
				continue
			}
			// Granted: a lost term's validity may still have to pass (RunManager).
			if wait := instant(l.notBefore.Load()).Sub(now()); wait > 0 {
				t := time.NewTimer(wait)
				defer t.Stop()
				select {
				case <-ctx.Done():
				case <-t.C:
				}
			}
			return
		}
	}
}
