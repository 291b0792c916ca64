package leadership

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// term is one period of leadership under one token.
type term struct {
	token  int64
	lin    lineage         // the lineage of token (lineage.go)
	slot   int             // the slot index the term is of (slot.go)
	writer string          // the writer ID drawn for this term (writer.go)
	ctx    context.Context // OnStartedLeading's, carrying writer; cancelled when the term ends
	cancel context.CancelFunc
	// started is set by the callback runner when it calls OnStartedLeading; ranToEnd when
	// it returned after ctx was cancelled (it ran for the whole term). Only the runner uses
	// them.
	started, ranToEnd bool
}

// holderKey identifies a grant for OnNewHolder.
type holderKey struct {
	uid   types.UID
	token int64
}

// loop is the one goroutine that decides: every observation, deadline and shutdown passes
// through run, so terms start and end in one order, the order the callbacks see.
type loop struct {
	e       *Elector
	ctx     context.Context // Run's
	cb      *runner
	readNow chan<- struct{}
	log     logr.Logger

	// Config.SingleTerm only. verdicts says, for the term started last, whether the runner
	// called its OnStartedLeading (nil without SingleTerm). awaiting: a term started and its
	// verdict is due; no other term starts meanwhile. consumed: OnStartedLeading was called,
	// so no other term starts and the loop ends with that term.
	verdicts <-chan bool
	awaiting bool
	consumed bool

	// Ordering of observations (see accept).
	seenRV   uint64
	haveRV   bool
	lockUID  types.UID
	tokenMax map[int32]int64 // highest token seen per slot on this incarnation of the lock

	// global records the consistent reads of a Global lock (global_reads.go); unused for a
	// lock of scope Cluster.
	global globalReads

	reported holderKey // last grant passed to OnNewHolder
	seen     int64     // token of the last grant to this pod an observation showed (logged once)
	term     *term     // the open term, nil when not leading
	view     view      // the holder as the newest accepted observation shows it
	lastTerm int64     // token of the last term that ended, for Release
	lastLin  lineage   // lastTerm's lineage
	deadline *time.Timer
}

// log returns the elector's logger with the lock and identity attached.
func (e *Elector) log() logr.Logger {
	return e.cfg.Log.WithValues("lock", e.cfg.Namespace+"/"+e.cfg.Lock, "identity", e.cfg.Identity, "pod", e.cfg.Name)
}

// run decides until ctx ends, then ends any open term.
func (l *loop) run(observations <-chan observation) {
	l.deadline = time.NewTimer(time.Hour)
	l.deadline.Stop()
	defer l.deadline.Stop()
	for !l.finished() {
		select {
		case <-l.ctx.Done():
			l.endReleasing("elector stopped")
			return
		case o := <-observations:
			l.observe(o)
		case done := <-l.e.releases:
			l.release(done)
		case <-l.e.abandons:
			l.abandon()
		case <-l.deadline.C:
			l.checkDeadline()
		case started := <-l.verdicts:
			l.verdict(started)
		}
	}
}

// finished reports whether SingleTerm's one term has ended: Run stops electing.
func (l *loop) finished() bool { return l.consumed && l.term == nil }

// verdict takes the runner's word on the term started last (SingleTerm): its OnStartedLeading
// was called, so it is Run's one term; or it was skipped (it ended while an OnNewHolder call
// ran), so the pod campaigns on, and a read now tells whether a grant stands.
func (l *loop) verdict(started bool) {
	l.awaiting = false
	if started {
		l.consumed = true
		return
	}
	if l.term == nil {
		select {
		case l.readNow <- struct{}{}:
		default: // a read is already due
		}
	}
}

// observe applies one observation.
func (l *loop) observe(o observation) {
	if o.read {
		if o.err != nil {
			l.e.readFailed(o.err)
			l.log.V(1).Info("consistent read failed", "error", o.err.Error())
			return
		}
		l.e.readDone(o.sent, leaseOf(o.lock))
	}
	// A Global lock is judged by the in-cluster rules with its holder in globalHolderUID, and
	// by the global bound below.
	o.lock = inClusterView(o.lock)
	if o.lock == nil || o.deleted {
		if o.deleted && !l.accept(o.lock) {
			return
		}
		// No lock, so no holder: a read that finds none is newer than anything seen before it.
		l.global.clear()
		l.view = view{}
		l.e.leader.Store(nil)
		l.e.setEnding(nil)
		l.end("lock not found")
		l.reported = holderKey{}
		l.e.setRefused(nil)
		return
	}
	if !l.accept(o.lock) {
		return
	}
	global := o.lock.Spec.IsGlobal()
	if global && o.read {
		// The only place a read enters the global bound: a consistent read, never a watch event.
		l.global.add(readOf(o.lock, o.sent, o.received, l.e.cfg.Identity))
	}
	// Every rule below reads the one slot whose term names this pod (slot 0 when none does):
	// a one-slot lock's whole status, or that slot's view of a lock of several slots.
	slot := slotOf(&o.lock.Status, l.e.cfg.Identity)
	sv := o.lock.Status.SlotView(slot)
	st := &sv
	lin := lineageOf(o.lock)
	l.view = view{obj: o.lock.UID, uid: st.HolderUID, token: st.FencingToken, lin: lin, phase: st.Phase}
	l.e.setLeader(st)
	l.e.setEnding(st)
	// A released token is not led again, by this process or a later one of the same pod: the
	// controller ends that term.
	// What this process released or abandoned counts only in the lock's own token lineage.
	g := judgeSlot(o.lock, st, l.e.cfg.Identity, l.e.released.load(lin), l.e.abandoned.load(lin))
	mine := g == grantLead
	switch g {
	case grantReleased:
		l.e.released.raise(lin, st.FencingToken)
	case grantResend:
		l.resend(st.FencingToken, lin)
	case grantNone:
		if resendReleasing(o.lock, st, l.e.cfg.Identity, l.e.released.load(lin)) {
			l.resend(st.FencingToken, lin)
		}
	}
	if l.term != nil && (!mine || st.FencingToken != l.term.token || lin != l.term.lin || int(slot) != l.term.slot) {
		l.endReleasing(endReason(st, l.e.cfg.Identity, int(slot) != l.term.slot))
		if l.finished() {
			return // SingleTerm: Run ends; a new grant is not reported or led
		}
	}
	if st.Phase == lockv1.PhaseHeld {
		if k := (holderKey{st.HolderUID, st.FencingToken}); k != l.reported {
			l.reported = k
			l.cb.newHolder(st.Holder, st.FencingToken)
		}
	}
	if !mine {
		l.e.setRefused(abandonedErr(l.view, l.e.cfg.Identity, l.e.abandoned.load(lin)))
		return
	}
	if st.FencingToken != l.seen {
		l.seen = st.FencingToken
		l.log.Info("grant seen", "token", st.FencingToken, "slot", slot, "source", source(o))
	}
	lease := time.Duration(st.TermLeaseSeconds) * time.Second
	if err := l.e.cfg.refuses(lease); err != nil {
		l.end("term refused")
		l.e.setRefused(err)
		l.log.Info("term refused", "token", st.FencingToken, "slot", slot, "error", err.Error())
		return
	}
	l.e.setRefused(nil)
	if !o.read {
		// A watch event never starts or extends a term; it asks for a consistent read now. On a
		// Global lock it does so also while leading, when it shows a round no consistent read
		// has shown yet (finding L3): the read that sees it moves the bound.
		if l.term == nil || (global && l.global.roundAhead(o.lock.UID, st.GlobalRound)) {
			select {
			case l.readNow <- struct{}{}:
			default: // a read is already due
			}
		}
		return
	}
	deadline := o.sent.Add(lease - l.e.cfg.margin(lease))
	if global {
		var why globalRefusal
		deadline, why = l.global.validUntil(o.lock.UID, deadline, st.FencingToken, l.e.cfg.Margin)
		if why != globalOK {
			l.refuseGlobal(st.FencingToken, why)
			return
		}
	}
	if now() >= deadline {
		if global {
			// The global bound can move earlier (a lower lock delay): it has passed.
			l.end("global bound passed")
		}
		return // confirmed too late to lead; the next read decides
	}
	if l.term == nil {
		if l.awaiting {
			return // SingleTerm: the last term's verdict is due; the next read decides
		}
		l.start(st.FencingToken, lin, int(slot), deadline)
		return
	}
	if global {
		l.bound(deadline)
		return
	}
	l.extend(deadline)
}

// refuseGlobal applies a refusal of the global bound to the grant of token: an open term ends
// at once (no release: the pod cannot confirm anything the bound refuses), and readiness fails
// while the refusal is for good (globalRefusalErr).
func (l *loop) refuseGlobal(token int64, why globalRefusal) {
	l.end("global bound: " + why.String())
	err := globalRefusalErr(why, token)
	l.e.setRefused(err)
	if err != nil {
		l.log.Info("term refused", "token", token, "error", err.Error())
		return
	}
	l.log.V(1).Info("waiting for rounds", "token", token, "why", why.String())
}

// source names where an observation came from, for logs.
func source(o observation) string {
	if o.read {
		return "consistent read"
	}
	return "watch event"
}

// accept orders observations: it drops one older than an observation already accepted (a
// lower resourceVersion, or a lower token on the same incarnation of the lock) and records a
// newer one.
func (l *loop) accept(lock *lockv1.DistributedLock) bool {
	rv, rvOK := parseRV(lock.ResourceVersion)
	if rvOK && l.haveRV && rv < l.seenRV {
		return false
	}
	st := &lock.Status
	if lock.UID == l.lockUID {
		if stale(st, l.tokenMax, rvOK && l.haveRV && rv > l.seenRV) {
			return false
		}
	} else {
		// A lock deleted and created again starts its maxFencingToken over; its tokens still
		// grow, because they are etcd revisions.
		l.lockUID, l.tokenMax = lock.UID, nil
	}
	if rvOK {
		l.seenRV, l.haveRV = rv, true
	}
	l.tokenMax = slotTokens(st, l.tokenMax)
	return true
}

// endReason says why an observation ends the open term.
func endReason(st *lockv1.DistributedLockStatus, me types.UID, moved bool) string {
	switch {
	case moved:
		return "another slot"
	case st.Phase != lockv1.PhaseHeld:
		return "phase " + string(st.Phase)
	case st.HolderUID != me:
		return "another holder"
	default:
		return "new token"
	}
}

// start opens a term of token, of lineage lin, in slot until deadline.
func (l *loop) start(token int64, lin lineage, slot int, deadline instant) {
	w := l.e.drawWriter()
	ctx, cancel := context.WithCancel(withSlot(withWriter(l.ctx, w), slot))
	l.term = &term{token: token, lin: lin, slot: slot, writer: w, ctx: ctx, cancel: cancel}
	l.e.ledTop.raise(lin, token) // before the term is visible: Abandon(token) finds its lineage
	l.e.led.Store(&termView{token: token, lin: lin, slot: slot, deadline: deadline})
	l.deadline.Reset(deadline.Sub(now()))
	l.e.count.terms.Add(1)
	l.awaiting = l.verdicts != nil
	l.cb.start(l.term)
	l.log.Info("leading", "token", token, "slot", slot, "validFor", deadline.Sub(now()).Round(time.Millisecond))
}

// extend moves the open term's deadline later.
func (l *loop) extend(deadline instant) {
	if v := l.e.led.Load(); v != nil && deadline <= v.deadline {
		return
	}
	l.e.led.Store(&termView{token: l.term.token, lin: l.term.lin, slot: l.term.slot, deadline: deadline})
	l.deadline.Reset(deadline.Sub(now()))
}

// bound sets the open term's deadline, earlier or later: the global bound of a Global lock,
// which a read showing a lower lock delay moves earlier.
func (l *loop) bound(deadline instant) {
	l.e.led.Store(&termView{token: l.term.token, lin: l.term.lin, slot: l.term.slot, deadline: deadline})
	l.deadline.Reset(deadline.Sub(now()))
}

// checkDeadline ends the open term when its deadline has passed (the timer may have fired for
// a deadline since extended).
func (l *loop) checkDeadline() {
	v := l.e.led.Load()
	if l.term == nil || v == nil {
		return
	}
	if left := v.deadline.Sub(now()); left > 0 {
		l.deadline.Reset(left)
		return
	}
	l.end("deadline passed without a confirming read")
}

// end closes the open term, if any, without a release.
func (l *loop) end(reason string) { l.endTerm(reason, nil) }

// endReleasing closes the open term, if any, with the release autoRelease allows.
func (l *loop) endReleasing(reason string) {
	if l.term != nil {
		l.endTerm(reason, l.autoRelease(l.term.token, l.term.lin))
	}
}

// endTerm closes the open term, if any: Valid turns false, the term's context is cancelled and
// its stop callbacks are queued, followed by the release j (nil: none).
func (l *loop) endTerm(reason string, j *releaseJob) {
	t := l.term
	if t == nil {
		if j != nil {
			j.finish(ErrNotLeading)
		}
		return
	}
	l.term, l.lastTerm, l.lastLin = nil, t.token, t.lin
	l.e.led.Store(nil)
	l.deadline.Stop()
	t.cancel()
	l.e.stopBegan(now())
	if j != nil {
		l.e.released.raise(j.lin, j.token)
	}
	l.cb.stop(t, j)
	l.log.Info("stopped leading", "token", t.token, "slot", t.slot, "reason", reason, "release", j != nil)
}
