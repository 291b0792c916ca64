package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

func objectKey(obj client.Object) client.ObjectKey { return client.ObjectKeyFromObject(obj) }

// TestStatusNeverGoesBack shows that the API server itself refuses a status update that lowers
// or removes maxFencingToken or controllerEpoch: a stale controller cannot roll status back.
func TestStatusNeverGoesBack(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	base := lockv1.DistributedLockStatus{
		Phase: lockv1.PhaseHeld, Holder: "p-0", HolderUID: "uid-0",
		FencingToken: 100, MaxFencingToken: 100, ControllerEpoch: 7, TermLeaseSeconds: 15,
	}
	tests := []struct {
		name       string
		mutate     func(*lockv1.DistributedLockStatus)
		wantReject string // field named in the rejection; "" means accepted
	}{
		{"lower maxFencingToken", func(s *lockv1.DistributedLockStatus) { s.MaxFencingToken, s.FencingToken = 99, 99 }, "status.maxFencingToken"},
		{"remove maxFencingToken", func(s *lockv1.DistributedLockStatus) { s.MaxFencingToken, s.FencingToken = 0, 0 }, "status.maxFencingToken"},
		{"lower controllerEpoch", func(s *lockv1.DistributedLockStatus) { s.ControllerEpoch = 6 }, "status.controllerEpoch"},
		{"remove controllerEpoch", func(s *lockv1.DistributedLockStatus) { s.ControllerEpoch = 0 }, "status.controllerEpoch"},
		{"no status at all", func(s *lockv1.DistributedLockStatus) { *s = lockv1.DistributedLockStatus{} }, "status.maxFencingToken"},
		{"token above max", func(s *lockv1.DistributedLockStatus) { s.FencingToken = 101 }, "status.fencingToken"},
		{"raise both", func(s *lockv1.DistributedLockStatus) {
			s.FencingToken, s.MaxFencingToken, s.ControllerEpoch = 120, 120, 8
		}, ""},
		{"same values, other phase", func(s *lockv1.DistributedLockStatus) { s.Phase = lockv1.PhaseReleasing }, ""},
		{"token below max (Releasing keeps the max)", func(s *lockv1.DistributedLockStatus) {
			s.Phase, s.Holder, s.HolderUID, s.FencingToken = lockv1.PhasePending, "", "", 0
		}, ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: "status-" + string(rune('a'+i)), Namespace: ns}, Spec: validSpec()}
			if err := k8s.Create(ctx, lock); err != nil {
				t.Fatalf("create: %v", err)
			}
			lock.Status = base
			if err := k8s.Status().Update(ctx, lock); err != nil {
				t.Fatalf("first status update: %v, want accepted", err)
			}
			tt.mutate(&lock.Status)
			err := k8s.Status().Update(ctx, lock)
			if tt.wantReject == "" {
				if err != nil {
					t.Fatalf("status update: %v, want accepted", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("status update accepted, want rejected naming %s", tt.wantReject)
			}
			if !strings.Contains(err.Error(), tt.wantReject) {
				t.Errorf("status update error = %q, want it to name %s", err, tt.wantReject)
			}
			var got lockv1.DistributedLock
			if err := k8s.Get(ctx, objectKey(lock), &got); err != nil {
				t.Fatalf("get: %v", err)
			}
			if got.Status.MaxFencingToken != base.MaxFencingToken || got.Status.ControllerEpoch != base.ControllerEpoch {
				t.Errorf("after rejected update: maxFencingToken %d, controllerEpoch %d; want %d, %d",
					got.Status.MaxFencingToken, got.Status.ControllerEpoch, base.MaxFencingToken, base.ControllerEpoch)
			}
		})
	}
}
