package leadership

import (
	"errors"
	"net/http"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// grant is what an accepted observation of the lock means for this pod.
type grant int

const (
	// grantNone: the lock is not Held by this pod (another holder, phase or no token).
	grantNone grant = iota
	// grantLead: Held by this pod under a token it has not released: it may lead.
	grantLead
	// grantReleased: Held by this pod under a token it released (in memory, or the lock's
	// holder-release annotation names this pod and that token): it does not lead, and it is
	// ready as for any term it does not lead. Also a token released in memory while the
	// annotation names another slot's current term (releasesOtherTerm): not sent again yet.
	grantReleased
	// grantResend: as grantReleased, but the annotation is absent although this process
	// released the token (the patch was lost, its outcome unknown, or the annotation was
	// removed): the release is sent again, once for this observation.
	grantResend
	// grantAbandoned: Held by this pod under a token this process abandoned (Abandon: a
	// resource admitted the token from another writer): it does not lead, sends no release,
	// and is not ready while the grant stands.
	grantAbandoned
)

// judge decides what the observed lock means for the pod me, whose process released every
// token up to released and abandoned every token up to abandoned (0: none), by the lock's
// own term (slot 0; the whole status of a one-slot lock). A holder-release annotation naming
// me and the observed token counts as released whatever this process remembers: a process
// restarted in the same pod does not lead a term an earlier process of the pod released.
func judge(lock *lockv1.DistributedLock, me types.UID, released, abandoned int64) grant {
	return judgeSlot(lock, &lock.Status, me, released, abandoned)
}

// judgeSlot is judge by the term of one slot of the lock, st (SlotView): the holder-release
// annotation names that term by its token. A Held token below the slot's own maxFencingToken
// is not led: a later term of the slot has been published.
func judgeSlot(lock *lockv1.DistributedLock, st *lockv1.DistributedLockStatus, me types.UID, released, abandoned int64) grant {
	if st.Phase != lockv1.PhaseHeld || st.HolderUID != me || st.FencingToken <= 0 || st.FencingToken < st.MaxFencingToken {
		return grantNone
	}
	if annotated(lock, me, st.FencingToken) {
		return grantReleased
	}
	if st.FencingToken <= abandoned {
		return grantAbandoned
	}
	if st.FencingToken <= released {
		if releasesOtherTerm(lock, me) {
			return grantReleased
		}
		return grantResend
	}
	return grantLead
}

// resendReleasing reports whether a Releasing term of me (st, its slot's view) under a token
// this process released lacks its release on the lock while nothing stands in its way: the
// patch was lost, its outcome unknown, or it was deferred behind another slot's release
// (ErrReleaseDeferred) that has since been acted on. The holder's release ends a Releasing
// term at once, so it is sent again (review 22c: only a Held term's was).
func resendReleasing(lock *lockv1.DistributedLock, st *lockv1.DistributedLockStatus, me types.UID, released int64) bool {
	return st.Phase == lockv1.PhaseReleasing && st.HolderUID == me && st.FencingToken > 0 && st.FencingToken <= released &&
		!annotated(lock, me, st.FencingToken) && !releasesOtherTerm(lock, me)
}

// releasesOtherTerm reports whether the lock's holder-release annotation names another pod's
// current term (another slot's holder, its term not ended yet). A lock has one annotation for
// all its slots: that pod's release replaced this pod's, and the controller has yet to act on
// it. This pod's release is sent again once the annotation names no current term; sent now, it
// would replace the other's, which would be sent again in turn, a pair of holders patching the
// lock for as long as the controller does not act.
func releasesOtherTerm(lock *lockv1.DistributedLock, me types.UID) bool {
	v, ok := lock.Annotations[lockv1.AnnotationHolderRelease]
	if !ok {
		return false
	}
	uid, token, err := lockv1.ParseHolderRelease(v)
	if err != nil || uid == me || uid == "" || token <= 0 {
		return false
	}
	st := &lock.Status
	for i := range st.SlotCount() {
		if t, _ := termOf(st, i); t.uid == uid && t.token == token {
			return true
		}
	}
	return false
}

// annotated reports whether the lock's holder-release annotation names uid and token.
func annotated(lock *lockv1.DistributedLock, uid types.UID, token int64) bool {
	v, ok := lock.Annotations[lockv1.AnnotationHolderRelease]
	if !ok {
		return false
	}
	u, tok, err := lockv1.ParseHolderRelease(v)
	return err == nil && u == uid && tok == token
}

// ErrReleaseDeferred is returned by a release that waits for another slot's: the lock's one
// holder-release annotation confirms another slot's current term, which only that slot's
// holder may replace (config/policy). The token stays released and the Elector sends the
// release again once that term has ended; nothing is lost.
var ErrReleaseDeferred = errors.New("leadership: release deferred until another slot's confirmed release is acted on")

// otherSlotReleasePending reports whether the API server refused a release because the
// annotation confirms another slot's current term (the policy's message for it).
func otherSlotReleasePending(err error) bool {
	return refusedRelease(err) && strings.Contains(err.Error(), "confirms the end of another slot's current term")
}

// refusedRelease reports whether a release patch's error proves the API server did not apply
// it: an answer that refuses the request (admission, authorization, validation, conflict, a
// lock not found, throttling). A timeout, a lost connection or a server error may hide an
// applied patch: the token then stays released, and an observation of the lock settles it
// (the annotation, or a release sent again while it is absent).
func refusedRelease(err error) bool {
	var st apierrors.APIStatus
	if err == nil || !errors.As(err, &st) {
		return false
	}
	code := int(st.Status().Code)
	switch {
	case apierrors.IsTimeout(err), apierrors.IsServerTimeout(err), code == http.StatusRequestTimeout:
		return false
	default:
		return code >= 400 && code < 500
	}
}
