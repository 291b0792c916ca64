package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

func globalSpec() lockv1.DistributedLockSpec {
	s := validSpec()
	s.Scope, s.GlobalName = lockv1.ScopeGlobal, "orders.example.com"
	return s
}

// TestGlobalSpecRules shows what the API server accepts and refuses in a Global lock's spec.
func TestGlobalSpecRules(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	tests := []struct {
		name       string
		spec       func() lockv1.DistributedLockSpec
		wantReject string // text of the refusal; "" means accepted
	}{
		{"global with a name", globalSpec, ""},
		{"global with preference", func() lockv1.DistributedLockSpec {
			s := globalSpec()
			s.ClusterPreference = []string{"east", "west"}
			return s
		}, ""},
		{"global without a name", func() lockv1.DistributedLockSpec {
			s := globalSpec()
			s.GlobalName = ""
			return s
		}, "globalName is required when scope is Global"},
		{"name without global", func() lockv1.DistributedLockSpec {
			s := validSpec()
			s.GlobalName = "x"
			return s
		}, "globalName may be set only when scope is Global"},
		{"preference without global", func() lockv1.DistributedLockSpec {
			s := validSpec()
			s.ClusterPreference = []string{"east"}
			return s
		}, "clusterPreference may be set only when scope is Global"},
		{"bad cluster name", func() lockv1.DistributedLockSpec {
			s := globalSpec()
			s.ClusterPreference = []string{"East_1"}
			return s
		}, "spec.clusterPreference[0]"},
		{"repeated cluster name", func() lockv1.DistributedLockSpec {
			s := globalSpec()
			s.ClusterPreference = []string{"east", "east"}
			return s
		}, "Duplicate value"},
		{"bad global name", func() lockv1.DistributedLockSpec {
			s := globalSpec()
			s.GlobalName = "Orders/1"
			return s
		}, "spec.globalName"},
		{"two slots", func() lockv1.DistributedLockSpec {
			s := globalSpec()
			s.Slots = 2
			return s
		}, "a Global lock has one slot"},
		{"routing", func() lockv1.DistributedLockSpec {
			s := globalSpec()
			s.Routing = &lockv1.Routing{Service: "svc"}
			return s
		}, "routing is not supported with scope Global"},
		{"short lease", func() lockv1.DistributedLockSpec {
			s := globalSpec()
			s.LeaseDurationSeconds = 5
			return s
		}, "must be at least 6 for a Global lock"},
		{"short delay", func() lockv1.DistributedLockSpec {
			s := globalSpec()
			s.LeaseDurationSeconds, s.LockDelaySeconds = 10, ptr.To[int32](19)
			return s
		}, "must be at least twice leaseDurationSeconds (10) for a Global lock"},
		{"delay of twice the lease", func() lockv1.DistributedLockSpec {
			s := globalSpec()
			s.LeaseDurationSeconds, s.LockDelaySeconds = 10, ptr.To[int32](20)
			return s
		}, ""},
		{"unknown scope", func() lockv1.DistributedLockSpec {
			s := validSpec()
			s.Scope = "Region"
			return s
		}, "spec.scope"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gspec-%d", i), Namespace: ns}, Spec: tt.spec()}
			err := k8s.Create(ctx, lock)
			switch {
			case tt.wantReject == "" && err != nil:
				t.Fatalf("create: %v, want accepted", err)
			case tt.wantReject != "" && err == nil:
				t.Fatalf("create accepted, want refused with %q", tt.wantReject)
			case tt.wantReject != "" && !strings.Contains(err.Error(), tt.wantReject):
				t.Fatalf("create error = %q, want it to contain %q", err, tt.wantReject)
			}
		})
	}
}

// TestGlobalDefaultsAndImmutability shows the Global defaults (a lock delay of twice the lease)
// and that scope and globalName cannot change.
func TestGlobalDefaultsAndImmutability(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	plain := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: "gimm-cluster", Namespace: ns}, Spec: validSpec()}
	global := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: "gimm-global", Namespace: ns}, Spec: globalSpec()}
	for _, l := range []*lockv1.DistributedLock{plain, global} {
		if err := k8s.Create(ctx, l); err != nil {
			t.Fatalf("create %s: %v", l.Name, err)
		}
	}
	if plain.Spec.Scope != lockv1.ScopeCluster {
		t.Errorf("default scope = %q, want Cluster", plain.Spec.Scope)
	}
	if got := global.Spec.EffectiveLockDelaySeconds(); got != 30 {
		t.Errorf("Global lock's effective delay = %d, want 30 (twice the default lease)", got)
	}
	if got := plain.Spec.EffectiveLockDelaySeconds(); got != 15 {
		t.Errorf("Cluster lock's effective delay = %d, want 15", got)
	}
	tests := []struct {
		name   string
		lock   *lockv1.DistributedLock
		mutate func(*lockv1.DistributedLockSpec)
		want   string
	}{
		{"cluster to global", plain, func(s *lockv1.DistributedLockSpec) { s.Scope, s.GlobalName = lockv1.ScopeGlobal, "g" }, "scope cannot be changed"},
		{"global to cluster", global, func(s *lockv1.DistributedLockSpec) { s.Scope, s.GlobalName = lockv1.ScopeCluster, "" }, "scope cannot be changed"},
		{"rename", global, func(s *lockv1.DistributedLockSpec) { s.GlobalName = "other" }, "globalName cannot be changed"},
		{"preference may change", global, func(s *lockv1.DistributedLockSpec) { s.ClusterPreference = []string{"west"} }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cur lockv1.DistributedLock
			if err := k8s.Get(ctx, objectKey(tt.lock), &cur); err != nil {
				t.Fatal(err)
			}
			before := cur.Spec
			tt.mutate(&cur.Spec)
			err := k8s.Update(ctx, &cur)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("update: %v, want accepted", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("update error = %v, want %q", err, tt.want)
			}
			var after lockv1.DistributedLock
			if err := k8s.Get(ctx, objectKey(tt.lock), &after); err != nil {
				t.Fatal(err)
			}
			if after.Spec.Scope != before.Scope || after.Spec.GlobalName != before.GlobalName {
				t.Errorf("after refused update: scope %q name %q, want %q %q", after.Spec.Scope, after.Spec.GlobalName, before.Scope, before.GlobalName)
			}
		})
	}
}

// TestGlobalStatusRules shows the API server's rules on a Global lock's rounds (docs/global.md,
// "Status"): a round steps by 1 only and never goes back, the token changes only with a
// round step, the delay only with the token, and holderUID is never set.
func TestGlobalStatusRules(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	base := lockv1.DistributedLockStatus{
		Phase: lockv1.PhaseHeld, Holder: "p-0", GlobalHolderUID: "uid-0", GlobalCluster: "east",
		FencingToken: 100, MaxFencingToken: 100, ControllerEpoch: 7, TermLeaseSeconds: 15,
		GlobalRound: 4, GlobalToken: 100, GlobalLockDelaySeconds: 30,
	}
	tests := []struct {
		name       string
		mutate     func(*lockv1.DistributedLockStatus)
		wantReject string
	}{
		{"next round, same token", func(s *lockv1.DistributedLockStatus) { s.GlobalRound = 5 }, ""},
		{"same round (another field)", func(s *lockv1.DistributedLockStatus) { s.Phase = lockv1.PhaseReleasing }, ""},
		{"next round, new token and delay", func(s *lockv1.DistributedLockStatus) {
			s.GlobalRound, s.GlobalToken, s.GlobalLockDelaySeconds, s.FencingToken, s.MaxFencingToken = 5, 120, 40, 120, 120
		}, ""},
		{"skip a round", func(s *lockv1.DistributedLockStatus) { s.GlobalRound = 6 }, "status.globalRound may step by 1 only"},
		{"round back", func(s *lockv1.DistributedLockStatus) { s.GlobalRound = 3 }, "status.globalRound may not decrease"},
		{"round removed", func(s *lockv1.DistributedLockStatus) { s.GlobalRound, s.GlobalToken = 0, 0 }, "status.globalRound may not decrease"},
		{"token without a round step", func(s *lockv1.DistributedLockStatus) { s.GlobalToken = 120 }, "status.globalToken may change only"},
		{"delay without a token change", func(s *lockv1.DistributedLockStatus) { s.GlobalRound, s.GlobalLockDelaySeconds = 5, 40 }, "status.globalLockDelaySeconds may change only"},
		{"holderUID set", func(s *lockv1.DistributedLockStatus) { s.HolderUID = "uid-0" }, "never status.holderUID"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("gstatus-%d", i), Namespace: ns}, Spec: globalSpec()}
			if err := k8s.Create(ctx, lock); err != nil {
				t.Fatalf("create: %v", err)
			}
			lock.Status = base
			lock.Status.GlobalRound = 1
			if err := k8s.Status().Update(ctx, lock); err != nil {
				t.Fatalf("first status update (round 1): %v, want accepted", err)
			}
			for r := int64(2); r <= base.GlobalRound; r++ {
				lock.Status.GlobalRound = r
				if err := k8s.Status().Update(ctx, lock); err != nil {
					t.Fatalf("status update to round %d: %v, want accepted", r, err)
				}
			}
			tt.mutate(&lock.Status)
			err := k8s.Status().Update(ctx, lock)
			if tt.wantReject == "" {
				if err != nil {
					t.Fatalf("status update: %v, want accepted", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantReject) {
				t.Fatalf("status update error = %v, want %q", err, tt.wantReject)
			}
			var got lockv1.DistributedLock
			if err := k8s.Get(ctx, objectKey(lock), &got); err != nil {
				t.Fatal(err)
			}
			if got.Status.GlobalRound != base.GlobalRound || got.Status.GlobalToken != base.GlobalToken {
				t.Errorf("after refused update: round %d token %d, want %d %d", got.Status.GlobalRound, got.Status.GlobalToken, base.GlobalRound, base.GlobalToken)
			}
		})
	}
	t.Run("first round is 1", func(t *testing.T) {
		lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: "gstatus-first", Namespace: ns}, Spec: globalSpec()}
		if err := k8s.Create(ctx, lock); err != nil {
			t.Fatalf("create: %v", err)
		}
		lock.Status = base
		lock.Status.GlobalRound = 2
		if err := k8s.Status().Update(ctx, lock); err == nil || !strings.Contains(err.Error(), "status.globalRound may step by 1 only") {
			t.Fatalf("first round 2: %v, want refused", err)
		}
	})
	t.Run("rounds only on Global locks", func(t *testing.T) {
		lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: "gstatus-cluster", Namespace: ns}, Spec: validSpec()}
		if err := k8s.Create(ctx, lock); err != nil {
			t.Fatalf("create: %v", err)
		}
		lock.Status = base
		lock.Status.GlobalRound = 1
		if err := k8s.Status().Update(ctx, lock); err == nil || !strings.Contains(err.Error(), "for Global locks only") {
			t.Fatalf("round on a Cluster lock: %v, want refused", err)
		}
	})
}
