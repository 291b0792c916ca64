// Package writer forms writer IDs: who presents a fencing token to a resource. A resource
// that admits one token from several writes (fence.Monotonic, the SQL form of package fence)
// records the writer beside the token and admits an equal token only from the writer that
// presented it first.
//
// A writer ID names a process, not a pod: "<owner>/<incarnation>", where owner is the pod UID
// (or any name without a "/") and incarnation is 64 random bits in hex, drawn when the
// process starts. Two processes of one pod (before and after a container restart) are two
// writers, so a write that a dead process sent before it died (buffered in the kernel, held
// by a proxy) never passes as the restarted process's under the same token: the resource has
// admitted that token from one of them only.
//
// One process can also lead one token twice (a term whose deadline passed, confirmed again by
// a later read), and a write its first term sent may arrive after the second term's. So
// pkg/leadership is stricter than one incarnation per process: it draws one each time a term
// starts (the first term presents Incarnation(), each later one NewIncarnation()), and
// lockwarden-agent draws one for each child it starts.
//
// The package needs only the standard library, so that pods (pkg/leadership) use the same
// format as resources (package fence).
package writer

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// incarnationLen is the length of an incarnation ID: 8 random bytes in hex.
const incarnationLen = 16

// ErrInvalid is wrapped by Parse for a string that is not a writer ID.
var ErrInvalid = errors.New("writer: not a writer ID")

// processIncarnation is this process's incarnation, drawn once at start.
var processIncarnation = NewIncarnation()

// Incarnation returns this process's incarnation ID, drawn once when the process started.
func Incarnation() string { return processIncarnation }

// NewIncarnation draws a fresh incarnation ID: for a process that starts other processes that
// write under its tokens (lockwarden-agent draws one for each child it starts).
func NewIncarnation() string {
	b := make([]byte, incarnationLen/2)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}

// ID returns the writer ID of incarnation of owner: "<owner>/<incarnation>".
func ID(owner, incarnation string) string { return owner + "/" + incarnation }

// Of returns the writer ID of this process for owner (the pod UID): ID(owner, Incarnation()).
func Of(owner string) string { return ID(owner, processIncarnation) }

// Parse splits a writer ID into its owner and incarnation. It fails, wrapping ErrInvalid, for
// a string without an owner, or whose incarnation is not 16 lowercase hex digits.
func Parse(id string) (owner, incarnation string, err error) {
	i := strings.LastIndexByte(id, '/')
	if i <= 0 {
		return "", "", fmt.Errorf("%w: %q has no owner/incarnation", ErrInvalid, id)
	}
	owner, incarnation = id[:i], id[i+1:]
	if len(incarnation) != incarnationLen || strings.Trim(incarnation, "0123456789abcdef") != "" {
		return "", "", fmt.Errorf("%w: %q: incarnation %q is not %d lowercase hex digits", ErrInvalid, id, incarnation, incarnationLen)
	}
	return owner, incarnation, nil
}

// Owner returns the owner of a writer ID (the pod UID), or id itself when it is not a writer
// ID (a resource that also takes writers without an incarnation).
func Owner(id string) string {
	if owner, _, err := Parse(id); err == nil {
		return owner
	}
	return id
}
