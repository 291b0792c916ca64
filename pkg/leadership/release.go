package leadership

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// A holder-confirmed release tells the controller that this pod's work under a term has
// stopped, so that it grants the next candidate at once instead of after the lock delay. It is
// sent only after the term's OnStartedLeading has returned and OnStoppedLeading has run (the
// callback runner sends it, after them, in queue order): the promise the release makes is
// kept by construction, unlike a release sent when the context is cancelled while the work
// may still run.

var (
	// ErrNotRunning is returned by Release when Run is not running.
	ErrNotRunning = errors.New("leadership: elector is not running")
	// ErrNotLeading is returned by Release when this pod has no term to release: it never led,
	// or the newest observation no longer names it with the token of its last term.
	ErrNotLeading = errors.New("leadership: no term of this pod to release")
)

// releaseJob is one release to send, after the callbacks queued before it.
type releaseJob struct {
	token int64
	lin   lineage // the lineage of token
	// obj is the UID of the lock object the release was decided on: the patch applies to
	// that object only (a lock deleted and created again under its name is another object,
	// whose term of the same number is another term).
	obj  types.UID
	done chan<- error // capacity 1, or nil when nobody waits (an automatic release)
	// auto: sent by Config.ReleaseOnStop, only if the term's OnStartedLeading ran until the
	// term ended (or never ran); Release's own jobs are sent regardless.
	auto bool
}

// view is what the newest accepted observation says about the holder.
type view struct {
	obj   types.UID // the lock object's UID
	uid   types.UID
	token int64
	lin   lineage // the lineage of the lock's tokens (lineage.go)
	phase lockv1.Phase
}

// names reports whether the view shows the term of token, of lineage lin, held by uid, Held
// or Releasing: a release of it is one the API server admits and the controller acts on. A
// token of another lineage is another grant, whatever its number.
func (v view) names(lin lineage, uid types.UID, token int64) bool {
	return v.lin == lin && v.uid == uid && v.token == token && token > 0 &&
		(v.phase == lockv1.PhaseHeld || v.phase == lockv1.PhaseReleasing)
}

// Release ends this pod's term and confirms it to the controller: the term's context is
// cancelled, and once OnStartedLeading has returned and OnStoppedLeading has run, the elector
// patches the lock's annotation lockwarden.io/holder-release with "<Identity>/<token>" (a JSON
// merge patch of that one annotation). The controller then grants the next candidate without
// the lock delay. With no term open, it releases the last term this pod led if the newest
// observation still names it (Held or Releasing), else it returns ErrNotLeading.
//
// This pod does not lead the released token again; a later grant (a new token) is led as
// usual. Release returns when the API server answered, with its error if it refused (the
// admission policy's message) or could not be reached within Config.ReleaseTimeout. A refused
// release is not retried: the pod may then lead that term again, and the controller ends it
// the slow way; except a release refused because the lock's one annotation confirms another
// slot's current term (a lock with spec.slots > 1): it returns ErrReleaseDeferred, the token
// stays released, and it is sent again once that term has ended, while Run runs (a process
// that exits first has its term ended by other proof or the lock delay). A release without an
// answer (a timeout, a lost connection: it may have been applied) keeps the token released,
// and is sent again when an observation shows the term still Held or Releasing without the
// annotation. The patch applies only to the lock object (UID) the release was decided on: a
// lock deleted and created again under its name meanwhile is left as it is (its term of the
// same number is another term), and Release returns an error wrapping ErrNotLeading. It
// returns ctx's error when ctx ends first (the release may still be sent), and ErrNotRunning
// when Run is not running.
func (e *Elector) Release(ctx context.Context) error {
	if !e.ran.Load() {
		return ErrNotRunning
	}
	done := make(chan error, 1)
	select {
	case e.releases <- done:
	case <-e.loopDone:
		return ErrNotRunning
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// release answers a Release call in the decision loop.
func (l *loop) release(done chan<- error) {
	me := l.e.cfg.Identity
	switch {
	case l.term != nil && l.term.token <= l.e.abandoned.load(l.term.lin):
		l.abandon() // Abandon's notice has not arrived yet: end it without a release
		done <- ErrNotLeading
	case l.term != nil:
		l.endTerm("release requested", &releaseJob{token: l.term.token, lin: l.term.lin, obj: l.view.obj, done: done})
	case l.lastTerm != 0 && l.lastTerm > l.e.abandoned.load(l.lastLin) && l.view.names(l.lastLin, me, l.lastTerm):
		l.e.released.raise(l.lastLin, l.lastTerm)
		l.cb.release(&releaseJob{token: l.lastTerm, lin: l.lastLin, obj: l.view.obj, done: done})
	default:
		done <- ErrNotLeading
	}
}

// autoRelease is the release to send for a term of token that ends now, or nil: only with
// Config.ReleaseOnStop, the newest observation still names this pod with that token, and the
// end is one the pod may confirm (not a passed deadline: the pod may lead again when a read
// confirms the term).
func (l *loop) autoRelease(token int64, lin lineage) *releaseJob {
	if !l.e.cfg.ReleaseOnStop || token <= l.e.abandoned.load(lin) || !l.view.names(lin, l.e.cfg.Identity, token) {
		return nil
	}
	return &releaseJob{token: token, lin: lin, obj: l.view.obj, auto: true}
}

// sendRelease patches the holder-release annotation for token, of lineage lin, on the lock
// object obj (its UID: the object the release was decided on); run by the callback runner.
// When the API server refused it, it lets the loop lead the token again; when the outcome is
// unknown the token stays released. Either error is returned, and logged here. When the lock
// is another object by now (deleted and created again under its name), the term the release
// was for is gone: nothing is patched, the token stays released in its lineage, and the
// error wraps ErrNotLeading. The release is never sent on to the new object: its term of the
// same number is another term, which only a decision on that object may release.
func (e *Elector) sendRelease(ctx context.Context, lin lineage, token int64, obj types.UID) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.ReleaseTimeout)
	defer cancel()
	value := lockv1.HolderReleaseValue(e.cfg.Identity, token)
	patch, err := releasePatch(value, obj)
	if err != nil {
		return fmt.Errorf("leadership: encode release: %w", err)
	}
	log := e.log()
	log.Info("release sent", "token", token)
	res := e.client.Patch(types.MergePatchType).
		Namespace(e.cfg.Namespace).
		Resource("distributedlocks").
		Name(e.cfg.Lock).
		Body(patch).
		Do(ctx)
	var code int
	res.StatusCode(&code)
	err = res.Error()
	if err != nil {
		err = fmt.Errorf("leadership: release distributedlock %s/%s term %d: %w", e.cfg.Namespace, e.cfg.Lock, token, err)
		if !refusedRelease(err) {
			// The API server may have applied it: the token stays released, and the next
			// observation that shows the term without the annotation sends it again.
			log.Info("release outcome unknown; the token stays released", "token", token, "status", code, "error", err.Error())
			return err
		}
		if lockReplaced(err) {
			log.Info("release not applied: the lock is another object than the one the term was on (deleted and created again); the term is gone", "token", token, "object", obj)
			return fmt.Errorf("%w: %w", ErrNotLeading, err)
		}
		if otherSlotReleasePending(err) {
			// Another slot's holder confirmed its term first (one annotation serves every
			// slot, and only its holder may replace it): the token stays released, and the
			// release goes out again once that term has ended (judgeSlot, review 22b).
			log.Info("release waits: the annotation confirms another slot's current term; sent again once that term ends", "token", token)
			return fmt.Errorf("%w: %w", ErrReleaseDeferred, err)
		}
		e.released.reset(lin, token)
		log.Info("release refused; the controller ends the term after the lock delay", "token", token, "status", code, "error", err.Error())
		return err
	}
	log.Info("released", "token", token, "status", code)
	return nil
}

// resend queues the release of token again, unless a release is queued or in flight: an
// observation shows this pod's released term Held without the annotation (the patch was
// lost, its outcome was unknown, or someone removed the annotation). At most one per
// observation, and none while an earlier release is unanswered.
func (l *loop) resend(token int64, lin lineage) {
	if l.cb.pending.Load() > 0 {
		return
	}
	l.log.Info("release not on the lock; sending it again", "token", token)
	l.cb.release(&releaseJob{token: token, lin: lin, obj: l.view.obj})
}

// skip drops an automatic release the runner may not send (the term's OnStartedLeading
// returned before the term ended): the loop may lead the token again.
func (e *Elector) skipRelease(j *releaseJob) {
	e.released.reset(j.lin, j.token)
	e.log().Info("release not sent: OnStartedLeading returned before the term ended, so its work may go on", "token", j.token)
	j.finish(nil)
}

// finish reports the outcome to the waiting Release call, if any.
func (j *releaseJob) finish(err error) {
	if j.done != nil {
		j.done <- err
	}
}
