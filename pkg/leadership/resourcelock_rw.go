package leadership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Get returns the lock as client-go's election record, from a consistent read. While the lock
// is granted to this pod (Held, this pod's UID, a token it has not released, a term its timings
// accept) the record names this pod, so client-go goes on to Update, which confirms the grant.
// Otherwise it names the holder (its UID) or the phase ("lockwarden:Releasing") with a renew
// time of now, so that client-go sees a valid lease and waits instead of calling Update.
//
// While client-go is not leading with the lock, Get first waits on a watch of the lock until
// an event shows a grant to this pod, for at most RetryPeriod (and ctx): a standby learns of
// its grant from the watch, not at its next poll. The watch only ends the wait; the
// consistent read that follows decides.
func (l *ResourceLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	l.awaitGrant(ctx)
	lock, r, err := l.read(ctx, true)
	if err != nil {
		return nil, nil, err
	}
	if lock == nil {
		// Not a NotFound error: client-go would call Create, which never succeeds.
		return nil, nil, fmt.Errorf("leadership: %s does not exist; declare it (kind DistributedLock)", l.Describe())
	}
	rec := record(lock, l.Identity(), r.err == nil || isLate(r.err))
	raw, err := json.Marshal(rec)
	if err != nil {
		return nil, nil, fmt.Errorf("leadership: encode election record: %w", err)
	}
	return rec, raw, nil
}

// Update renews or acquires: it succeeds when a consistent read, sent now, shows the lock
// granted to this pod with more than RenewDeadline + RetryPeriod of validity left when it
// returns; the term's token is then Token(). It writes nothing. A record with another
// LeaseDuration than ResourceLockConfig's is refused (the manager has other timings). A
// record with no holder is client-go's release (ReleaseOnCancel): it is ignored, because
// client-go sends it before controller-runtime has stopped the controllers of a lost lease;
// RunManager's ReleaseOnStop releases after they stopped.
func (l *ResourceLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.rw.Lock()
	defer l.rw.Unlock()
	err := l.update(ctx, ler)
	if err == nil && ler.HolderIdentity != "" {
		l.claimed.Store(true)
		t := time.Now()
		l.lastOK.Store(&t)
	}
	return err
}

// update is Update without the bookkeeping of its outcome.
func (l *ResourceLock) update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if ler.HolderIdentity == "" {
		l.led.Store(nil)
		l.e.log().V(1).Info(errIgnoredRelease.Error())
		return nil
	}
	if ler.HolderIdentity != l.Identity() {
		return fmt.Errorf("leadership: %s cannot record holder %q: only lockwarden's controller grants the lock", l.Describe(), ler.HolderIdentity)
	}
	if err := l.checkLeaseDuration(ler); err != nil {
		l.led.Store(nil)
		return err
	}
	l.noteRound(ctx)
	_, r, err := l.read(ctx, false)
	if err != nil {
		return err
	}
	return r.err
}

// read sends a consistent read and judges it: the term it confirms becomes the lock's term, a
// read that confirms none ends it. It returns the lock (nil when it does not exist), the
// judgement, and the read's error. A Get's read (get) before any Update record showed the
// manager's LeaseDuration, without ExactTimings, cannot judge the timings: it only says
// whether the lock is granted (so that client-go sends the Update that shows them) and
// confirms no term.
func (l *ResourceLock) read(ctx context.Context, get bool) (*lockv1.DistributedLock, renewal, error) {
	sent := now()
	if l.campaigning.CompareAndSwap(false, true) {
		l.mu.Lock()
		l.lastRead = sent // readiness counts from the first read sent
		l.mu.Unlock()
	}
	rctx, cancel := context.WithTimeout(ctx, maxReadTimeout)
	lock, err := l.e.get(rctx)
	cancel()
	done := now()
	if err != nil {
		l.readOK.Store(false)
		// The confirmed term stays valid until its deadline: a failed read proves nothing.
		l.mu.Lock()
		l.readErr = err
		l.mu.Unlock()
		return nil, renewal{}, err
	}
	if err := slotsRefused(lock, l.Describe()); err != nil {
		l.refuseSlots(lock, sent, err)
		return nil, renewal{}, err
	}
	lock = inClusterView(lock) // a Global lock's holder is status.globalHolderUID
	lin := lineageOf(lock)     // what this process released or abandoned counts in it only
	g := judge(lock, l.cfg.Identity, l.e.released.load(lin), l.e.abandoned.load(lin))
	var refused error
	if g == grantLead {
		refused = l.e.cfg.refuses(time.Duration(lock.Status.TermLeaseSeconds) * time.Second)
	}
	margin := l.e.cfg.margin(leaseOf(lock))
	t := l.timings()
	provisional := get && !l.cfg.ExactTimings && l.leaseSeen.Load() == 0
	if provisional {
		t = timings{} // unknown until an Update's record shows the LeaseDuration
	}
	r := decideRenewal(lock, g, refused, margin, t, sent, done, instant(l.notBefore.Load()))
	if lock != nil && lock.Spec.IsGlobal() {
		r = l.globalRenewal(lock, r, margin, t, sent, done)
	}
	l.readOK.Store(r.err == nil)
	if provisional && r.err == nil {
		r = renewal{} // granted, but no term is confirmed under unknown timings
		l.settleRead(lock, sent)
	} else {
		l.settle(lock, g, r, sent)
	}
	if g == grantResend {
		// A release this lock sent may have been lost: send it again (its outcome settles the
		// token as Release does).
		_ = l.e.sendRelease(ctx, lin, lock.Status.FencingToken, lock.UID)
	}
	return lock, r, nil
}

// settleRead records a successful read for readiness.
func (l *ResourceLock) settleRead(lock *lockv1.DistributedLock, sent instant) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.readSucceeded(lock, sent)
}

// readSucceeded records a successful read sent at sent; l.mu is held.
func (l *ResourceLock) readSucceeded(lock *lockv1.DistributedLock, sent instant) {
	if sent > l.lastRead {
		l.lastRead = sent
	}
	l.readErr = nil
	if lease := leaseOf(lock); lease > 0 {
		l.limit = readLimit(&l.e.cfg, lease)
	}
}

// settle records what a read showed: the confirmed term, readiness, and refusals.
func (l *ResourceLock) settle(lock *lockv1.DistributedLock, g grant, r renewal, sent instant) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.readSucceeded(lock, sent)
	prev := l.refused
	st := &lock.Status
	lin := lineageOf(lock)
	l.refused = abandonedErr(view{uid: st.HolderUID, token: st.FencingToken, lin: lin, phase: st.Phase}, l.cfg.Identity, l.e.abandoned.load(lin))
	if g == grantLead && isRefusal(r.err) {
		if prev == nil {
			l.e.log().Info("term refused", "token", lock.Status.FencingToken, "error", r.err.Error())
		}
		l.refused = r.err
	}
	if r.err != nil {
		l.led.Store(nil)
		return
	}
	v := &termView{token: r.token, lin: lin, deadline: r.deadline}
	if old := l.led.Load(); old != nil && old.token == v.token && old.lin == v.lin && old.deadline > v.deadline && !lock.Spec.IsGlobal() {
		// An older read answered late: it does not shorten the term. The global bound is
		// computed from every read so far, so its newest value stands, earlier or not.
		v = old
	}
	l.e.ledTop.raise(lin, v.token) // before the term is visible: Abandon(token) finds its lineage
	l.led.Store(v)
	if l.last == nil || l.last.token != v.token || l.last.lin != v.lin || l.last.deadline < v.deadline {
		l.last = v
	}
}

// isRefusal reports whether err refuses this pod's grant for good (the timings or the margin),
// rather than for this read.
func isRefusal(err error) bool {
	return err != nil && !isNotGranted(err) && !isLate(err) && !errors.Is(err, errWaitingOut)
}

// record is the election record a lock shows client-go; granted says whether a grant to me
// is one this pod may lead.
func record(lock *lockv1.DistributedLock, me string, granted bool) *resourcelock.LeaderElectionRecord {
	st := &lock.Status
	rec := &resourcelock.LeaderElectionRecord{
		LeaseDurationSeconds: max(int(leaseOf(lock)/time.Second), 1),
		RenewTime:            metav1.NewTime(time.Now()),
		LeaderTransitions:    int(st.Transitions),
	}
	if st.AcquireTime != nil {
		rec.AcquireTime = *st.AcquireTime
	}
	switch {
	case st.Phase == lockv1.PhaseHeld && string(st.HolderUID) == me && granted:
		rec.HolderIdentity = me
	case st.Phase == lockv1.PhaseHeld && st.HolderUID == "" && lock.Spec.IsGlobal():
		// A Global lock's term held by another cluster: no pod here holds it, and client-go
		// must see the lease taken, not free.
		rec.HolderIdentity = "lockwarden:cluster/" + st.GlobalCluster
	case st.Phase == lockv1.PhaseHeld && string(st.HolderUID) != me:
		rec.HolderIdentity = string(st.HolderUID)
	case st.Phase == "":
		rec.HolderIdentity = "lockwarden:Pending"
	default:
		rec.HolderIdentity = "lockwarden:" + string(st.Phase)
	}
	return rec
}

// globalRenewal records a consistent read of a Global lock (view: inClusterView) sent at sent
// and answered at done, and caps r by the global bound over the reads recorded so far.
func (l *ResourceLock) globalRenewal(view *lockv1.DistributedLock, r renewal, margin time.Duration, t timings, sent, done instant) renewal {
	lease := time.Duration(view.Status.TermLeaseSeconds) * time.Second
	l.mu.Lock()
	l.global.add(readOf(view, sent, done, l.cfg.Identity))
	until, why := l.global.validUntil(view.UID, sent.Add(lease-margin), view.Status.FencingToken, l.e.cfg.Margin)
	l.mu.Unlock()
	return capRenewal(r, until, why, t, done)
}
