package controllers

import (
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// TestTermLease: P0 and the keepalives follow the TTL the grant was made with, never a
// spec.leaseDurationSeconds raised mid-term (review rev-ctl, TestReviewCtlGlobalLeaseRaised).
func TestTermLease(t *testing.T) {
	own := func(leaseSeconds int32) lease.GlobalView {
		r := grantRec(east, "obj", "pod-1", 12)
		r.LeaseSeconds = leaseSeconds
		return lease.GlobalView{Held: true, Token: gTok, Grant: r}
	}
	published := lockv1.DistributedLockStatus{FencingToken: gTok, GlobalToken: gTok, TermLeaseSeconds: 9}
	tests := []struct {
		name string
		v    lease.GlobalView
		st   lockv1.DistributedLockStatus
		want time.Duration
	}{
		{"own grant with its TTL recorded: the grant's, not the raised spec's", own(6), published, 6 * time.Second},
		{"own grant of an older manager (no TTL recorded): the published termLeaseSeconds of its token", own(0), published, 9 * time.Second},
		{"own grant, no TTL recorded, the status publishes another token: the spec's", own(0), lockv1.DistributedLockStatus{FencingToken: 5, GlobalToken: 5, TermLeaseSeconds: 9}, 21 * time.Second},
		{"another cluster's grant: the spec's (the next grant's TTL)", lease.GlobalView{Held: true, Token: gTok, Grant: grantRec(west, "obj", "pod-1", 12)}, published, 21 * time.Second},
		{"another object's grant of this cluster: the spec's", lease.GlobalView{Held: true, Token: gTok, Grant: grantRec(east, "obj-2", "pod-1", 12)}, published, 21 * time.Second},
		{"K absent: the spec's", lease.GlobalView{Rev: 40}, published, 21 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := lockv1.DistributedLockSpec{LeaseDurationSeconds: 21}
			if got := termLease(&spec, &tt.st, tt.v, east, "obj"); got != tt.want {
				t.Errorf("termLease = %v, want %v", got, tt.want)
			}
		})
	}
}
