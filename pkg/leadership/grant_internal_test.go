package leadership

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestJudge checks what each observed lock means for pod "me", with or without a release
// remembered by this process and on the lock.
func TestJudge(t *testing.T) {
	const me, other types.UID = "me", "other"
	lock := func(phase lockv1.Phase, holder types.UID, token int64, release string) *lockv1.DistributedLock {
		l := &lockv1.DistributedLock{Status: lockv1.DistributedLockStatus{Phase: phase, HolderUID: holder, FencingToken: token}}
		if release != "" {
			l.Annotations = map[string]string{lockv1.AnnotationHolderRelease: release}
		}
		return l
	}
	held := lockv1.PhaseHeld
	tests := []struct {
		name     string
		lock     *lockv1.DistributedLock
		released int64
		want     grant
		// abandoned is the highest token this process abandoned (0: none).
		abandoned int64
	}{
		{"held by me, nothing released", lock(held, me, 40, ""), 0, grantLead, 0},
		{"held by me, an older token released", lock(held, me, 40, ""), 39, grantLead, 0},
		{"held by me, an older token's annotation", lock(held, me, 40, lockv1.HolderReleaseValue(me, 39)), 0, grantLead, 0},
		{"held by me, another pod's annotation with my token", lock(held, me, 40, lockv1.HolderReleaseValue(other, 40)), 0, grantLead, 0},
		{"held by me, malformed annotation", lock(held, me, 40, "me-40"), 0, grantLead, 0},
		{"restarted process: annotation names me and the token", lock(held, me, 40, lockv1.HolderReleaseValue(me, 40)), 0, grantReleased, 0},
		{"annotation and memory agree", lock(held, me, 40, lockv1.HolderReleaseValue(me, 40)), 40, grantReleased, 0},
		{"released in memory, annotation absent", lock(held, me, 40, ""), 40, grantResend, 0},
		{"released in memory, annotation of an older term", lock(held, me, 40, lockv1.HolderReleaseValue(me, 39)), 40, grantResend, 0},
		{"released a newer token than the observed one", lock(held, me, 40, ""), 41, grantResend, 0},
		{"another holder", lock(held, other, 40, ""), 0, grantNone, 0},
		{"another holder, my token released", lock(held, other, 40, ""), 40, grantNone, 0},
		{"releasing", lock(lockv1.PhaseReleasing, me, 40, lockv1.HolderReleaseValue(me, 40)), 40, grantNone, 0},
		{"pending", lock(lockv1.PhasePending, "", 0, ""), 0, grantNone, 0},
		{"held with no token", lock(held, me, 0, ""), 0, grantNone, 0},
		{"abandoned by this process", lock(held, me, 40, ""), 0, grantAbandoned, 40},
		{"an older token abandoned", lock(held, me, 40, ""), 0, grantLead, 39},
		{"abandoned and released: no release sent again", lock(held, me, 40, ""), 40, grantAbandoned, 40},
		{"abandoned, annotation names me and the token", lock(held, me, 40, lockv1.HolderReleaseValue(me, 40)), 0, grantReleased, 40},
		{"another holder, my token abandoned", lock(held, other, 40, ""), 0, grantNone, 40},
		{"releasing, my token abandoned", lock(lockv1.PhaseReleasing, me, 40, ""), 0, grantNone, 40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := judge(tt.lock, me, tt.released, tt.abandoned); got != tt.want {
				t.Errorf("judge(%s %s/%d %q, released %d, abandoned %d) = %v, want %v", tt.lock.Status.Phase, tt.lock.Status.HolderUID,
					tt.lock.Status.FencingToken, tt.lock.Annotations[lockv1.AnnotationHolderRelease], tt.released, tt.abandoned, got, tt.want)
			}
		})
	}
}

// TestRefusedRelease checks which release errors prove the patch was not applied.
func TestRefusedRelease(t *testing.T) {
	gr := schema.GroupResource{Group: "lockwarden.io", Resource: "distributedlocks"}
	wrap := func(err error) error { return fmt.Errorf("leadership: release distributedlock ns/l term 4: %w", err) }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"admission policy refuses", wrap(apierrors.NewForbidden(gr, "l", errors.New("holder-release refused"))), true},
		{"invalid", wrap(apierrors.NewInvalid(schema.GroupKind{Group: "lockwarden.io", Kind: "DistributedLock"}, "l", nil)), true},
		{"not found", wrap(apierrors.NewNotFound(gr, "l")), true},
		{"unauthorized", wrap(apierrors.NewUnauthorized("token expired")), true},
		{"throttled", wrap(apierrors.NewTooManyRequests("busy", 1)), true},
		{"conflict", wrap(apierrors.NewConflict(gr, "l", errors.New("changed"))), true},
		{"server timeout (504)", wrap(apierrors.NewTimeoutError("slow etcd", 1)), false},
		{"server timeout (500 ServerTimeout)", wrap(apierrors.NewServerTimeout(gr, "patch", 1)), false},
		{"request timeout (408)", wrap(&apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 408}}), false},
		{"internal error", wrap(apierrors.NewInternalError(errors.New("etcd"))), false},
		{"service unavailable", wrap(apierrors.NewServiceUnavailable("shutting down")), false},
		{"client deadline", wrap(context.DeadlineExceeded), false},
		{"connection reset", wrap(&net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := refusedRelease(tt.err); got != tt.want {
				t.Errorf("refusedRelease(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
