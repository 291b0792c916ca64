package controllers

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Two annotations ask for a term to end (api/v1alpha1/annotations.go):
//
//   - the holder's own release (lockwarden.io/holder-release = "<uid>/<token>"), which the
//     API server admits only from the holder pod's bound service-account token
//     (config/policy). It is proof that the work under that term stopped, like an attested
//     termination: the term ends at once and the next candidate is granted.
//   - an operator's request (lockwarden.io/release-request = "<token>"), which proves
//     nothing about the holder: the term goes through Releasing and the full lock delay, like
//     any other end the controller cannot prove.
//
// Each is proof or a request only for the term it names. Tokens are etcd revisions, so a
// holder released and granted again gets a new token: a value left on the lock never matches
// a later term. The controller never writes or removes these annotations.

// releases is what a lock's release annotations ask, parsed.
type releases struct {
	// holderUID and holderToken: the holder-release annotation; holderToken is 0 when it is
	// absent or malformed (a malformed value is refused by the admission policy anyway).
	holderUID   types.UID
	holderToken int64
	// request is the release request's token (0: none, or malformed: see requestErr);
	// requestRaw its value as written.
	request    int64
	requestRaw string
	requestErr error
	// reason is the operator's reason, as recorded (lockv1.ReleaseReason).
	reason string
}

// readReleases parses the release annotations of a lock.
func readReleases(annotations map[string]string) releases {
	var r releases
	if v, ok := annotations[lockv1.AnnotationHolderRelease]; ok {
		if uid, token, err := lockv1.ParseHolderRelease(v); err == nil {
			r.holderUID, r.holderToken = uid, token
		}
	}
	if v, ok := annotations[lockv1.AnnotationReleaseRequest]; ok {
		r.requestRaw = v
		r.request, r.requestErr = lockv1.ParseReleaseRequest(v)
		r.reason = lockv1.ReleaseReason(annotations[lockv1.AnnotationReleaseReason])
	}
	return r
}

// holderReleased reports whether the holder's own release names the published term (its
// holder UID and token) and etcd's record of it: etcd's key under that token names the same
// pod, or etcd holds no key under that token (the key vanished, or a later grant whose status
// write was lost replaced it). A status that etcd contradicts is not a term to end.
func holderReleased(in *input) bool {
	st, r, g := in.status, in.release, in.g
	if st.HolderUID == "" || st.FencingToken == 0 || r.holderUID != st.HolderUID || r.holderToken != st.FencingToken {
		return false
	}
	return !g.present() || g.token != st.FencingToken || g.holderUID == st.HolderUID
}

// holderReleaseIgnored reports whether a holder-release annotation is present that names no
// current term (left from an earlier term, or for another pod): it changes nothing.
func holderReleaseIgnored(in *input) bool {
	return in.release.holderToken != 0 && !holderReleased(in)
}

// operatorRequested reports whether an operator's release request names the published term.
func operatorRequested(in *input) bool {
	st, r := in.status, in.release
	return st.HolderUID != "" && st.FencingToken != 0 && r.request == st.FencingToken
}

// requestIgnored says why an operator's release request changes nothing ("" when there is
// none, or it names the current term, or it was acted on in an earlier term this history
// shows). Such a request is reported once by a Warning Event.
func requestIgnored(in *input) string {
	st, r := in.status, in.release
	switch {
	case r.requestRaw == "":
		return ""
	case r.requestErr != nil:
		return fmt.Sprintf("release request ignored: %v", r.requestErr)
	case operatorRequested(in):
		return ""
	}
	for _, h := range st.History {
		// served: that term ended by this request, or went Releasing by it (its message is
		// the request's reason) and then ended sooner, e.g. by the holder's own release
		if h.Token == r.request && h.Ended != nil && (h.Reason == lockv1.ReasonOperatorRelease || (h.Message != "" && h.Message == r.reason)) {
			return ""
		}
	}
	if st.HolderUID == "" {
		return fmt.Sprintf("release request for token %d ignored: no term is open", r.request)
	}
	return fmt.Sprintf("release request for token %d ignored: the current term is %s's, token %d", r.request, st.Holder, st.FencingToken)
}

// requestNamesSlot reports whether a release request's token is a term of a slot other than
// slot 0, open or in its history: a request for another slot is not ignored.
func requestNamesSlot(st *lockv1.DistributedLockStatus, token int64) bool {
	for _, s := range st.Slots {
		if token != 0 && s.FencingToken == token {
			return true
		}
		for _, h := range s.History {
			if h.Token == token {
				return true
			}
		}
	}
	return false
}

// requestWarned reports whether this replica already reported the release request value
// raw as ignored for the lock.
func (m *memory) requestWarned(key string, uid types.UID, raw string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	lm := m.locks[key]
	return lm != nil && lm.uid == uid && lm.warnedRequest == raw
}

// requestWarnedNow records that the release request value raw was reported as ignored.
func (m *memory) requestWarnedNow(key string, uid types.UID, raw string) {
	m.with(key, uid, func(lm *lockMemory, _ time.Time) { lm.warnedRequest = raw })
}

// releaseMessage is the Event text of an operator's release.
func releaseMessage(holder string, token int64, reason string) string {
	msg := "operator asked to end the term of " + holder + " (token " + strconv.FormatInt(token, 10) + ")"
	if reason != "" {
		msg += ": " + reason
	}
	return msg
}

// noteReleases reports release annotations that change nothing: an ignored operator request
// by one Warning Event (per value, per replica), a holder release that names no current term
// in the debug log only (one is left on the lock after every holder-confirmed release).
func (t *turn) noteReleases(ctx context.Context) {
	if holderReleaseIgnored(&t.in) {
		log.FromContext(ctx).V(1).Info("holder release names no current term; ignored", "lock", t.key,
			"value", t.lock.Annotations[lockv1.AnnotationHolderRelease], "holderUID", t.in.status.HolderUID, "token", t.in.status.FencingToken)
	}
	why := requestIgnored(&t.in)
	if t.slot != nil && (t.slot.index != 0 || requestNamesSlot(&t.slot.real.Status, t.in.release.request)) {
		why = "" // slot 0's turn reports a request that names no slot's term
	}
	key, uid, raw := t.key, t.lock.UID, t.in.release.requestRaw
	if why == "" || t.r.mem.requestWarned(key, uid, raw) {
		return
	}
	t.event(nil, corev1.EventTypeWarning, lockv1.ReasonReleaseRequestIgnored, "Ignore", "%s", why)
	t.onAck = append(t.onAck, func() { t.r.mem.requestWarnedNow(key, uid, raw) })
}
