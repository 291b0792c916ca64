package v1alpha1

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Annotations on a DistributedLock that end a term. Both are requests: the controller acts on
// one only when it names the current term (holder and token as etcd records them), and
// ignores it otherwise, so a value left over from an earlier term never ends a later one.
const (
	// AnnotationHolderRelease is the holder pod's own confirmation that its work under a term
	// has stopped: "<holderUID>/<token>" (decimal token), e.g. set by pkg/leadership once
	// OnStartedLeading has returned. The controller ends that term at once, without the lock
	// delay, and grants the next candidate. Only the holder pod may set it: the
	// ValidatingAdmissionPolicy lockwarden-holder-release (config/policy) admits it only from
	// a service-account token bound to the pod named by status.holderUID, with the value of
	// status.holderUID and status.fencingToken, changing nothing else.
	AnnotationHolderRelease = "lockwarden.io/holder-release"

	// AnnotationReleaseRequest is an operator's request to end the term whose token it names:
	// "<token>" (decimal). The controller moves that term to Releasing and waits the full lock
	// delay, as for any end it cannot prove; a request for another token is ignored (an Event
	// says so). RBAC governs it: anyone who may patch the lock may set it.
	AnnotationReleaseRequest = "lockwarden.io/release-request"

	// AnnotationReleaseReason is the operator's free-text reason for AnnotationReleaseRequest,
	// recorded in status.history and the Event. At most MaxReleaseReasonLength bytes are kept.
	AnnotationReleaseReason = "lockwarden.io/release-reason"
)

// MaxReleaseReasonLength is how much of AnnotationReleaseReason the controller records.
const MaxReleaseReasonLength = 256

// ErrInvalidRelease is wrapped by every error of ParseHolderRelease and ParseReleaseRequest.
var ErrInvalidRelease = errors.New("invalid release annotation")

// HolderReleaseValue is the value of AnnotationHolderRelease for a holder UID and token.
func HolderReleaseValue(uid types.UID, token int64) string {
	return string(uid) + "/" + strconv.FormatInt(token, 10)
}

// ParseHolderRelease parses a value of AnnotationHolderRelease ("<holderUID>/<token>").
func ParseHolderRelease(v string) (uid types.UID, token int64, err error) {
	u, t, ok := strings.Cut(v, "/")
	switch {
	case !ok:
		return "", 0, fmt.Errorf("%w: %s %q: want <holderUID>/<token>", ErrInvalidRelease, AnnotationHolderRelease, v)
	case u == "" || strings.TrimSpace(u) != u || strings.Contains(u, "/"):
		return "", 0, fmt.Errorf("%w: %s %q: the holder UID is empty or malformed", ErrInvalidRelease, AnnotationHolderRelease, v)
	}
	token, err = parseToken(t)
	if err != nil {
		return "", 0, fmt.Errorf("%w: %s %q: %w", ErrInvalidRelease, AnnotationHolderRelease, v, err)
	}
	return types.UID(u), token, nil
}

// ParseReleaseRequest parses a value of AnnotationReleaseRequest ("<token>").
func ParseReleaseRequest(v string) (token int64, err error) {
	token, err = parseToken(v)
	if err != nil {
		return 0, fmt.Errorf("%w: %s %q: %w", ErrInvalidRelease, AnnotationReleaseRequest, v, err)
	}
	return token, nil
}

// ReleaseReason is the recorded form of an AnnotationReleaseReason value: trimmed, cut to
// MaxReleaseReasonLength bytes at a character boundary.
func ReleaseReason(v string) string {
	v = strings.TrimSpace(v)
	if len(v) <= MaxReleaseReasonLength {
		return v
	}
	cut := MaxReleaseReasonLength
	for cut > 0 && !utf8Start(v[cut]) {
		cut--
	}
	return v[:cut]
}

// utf8Start reports whether b begins a UTF-8 encoded character.
func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// parseToken parses a fencing token: a positive decimal integer, nothing around it.
func parseToken(s string) (int64, error) {
	if s == "" {
		return 0, errors.New("the token is empty")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("the token %q is not a decimal number", s)
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the token %q is out of range", s)
	}
	if n <= 0 {
		return 0, fmt.Errorf("the token %q is not positive", s)
	}
	return n, nil
}
