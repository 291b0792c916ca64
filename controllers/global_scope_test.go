package controllers_test

import (
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
)

// globalLock makes spec a Global lock (controllertest.GlobalLock).
var globalLock = controllertest.GlobalLock

// TestGlobalLocksIgnoredByClusterReconciler: on a manager without --cluster-name, a Global
// lock beside a cluster-scoped one over the same Ready pod gets Held=False ClusterNameUnset
// and nothing else: no phase, holder, token, holderUID or other condition (the in-cluster
// reconciler writes every one of them on its first turn), and no key under the cluster's
// engine prefix; the cluster-scoped lock is granted as always. Deleting the Global lock lets
// it go (its finalizer, set by the admission policy, is dropped).
func TestGlobalLocksIgnoredByClusterReconciler(t *testing.T) {
	f := newFixture(t)
	f.pod("p1", "app")
	f.lock("plain", "app", nil)
	f.lock("global", "app", globalLock("orders.example.com"))
	f.waitFor("plain", 20*time.Second, "held by p1", heldBy("p1"))
	unset := func(l *lockv1.DistributedLock) bool {
		c := meta.FindStatusCondition(l.Status.Conditions, lockv1.ConditionHeld)
		return c != nil && c.Status == "False" && c.Reason == controllers.ReasonClusterNameUnset
	}
	f.waitFor("global", 20*time.Second, "Held=False ClusterNameUnset", unset)
	untouched := func() error {
		l := f.get("global")
		st := l.Status
		switch {
		case !unset(l):
			return fmt.Errorf("Held condition is not ClusterNameUnset")
		case len(st.Conditions) != 1:
			return fmt.Errorf("%d conditions, want only Held", len(st.Conditions))
		case st.Phase != "" || st.Holder != "" || st.HolderUID != "" || st.GlobalHolderUID != "" || st.FencingToken != 0 || st.MaxFencingToken != 0 || st.LeaseID != "" || len(st.History) != 0 || st.EligibleCandidates != 0 || st.GlobalRound != 0:
			return fmt.Errorf("the status shows a term or an in-cluster turn")
		case f.keyToken("global") != 0:
			return fmt.Errorf("an engine key exists under the cluster's prefix")
		}
		return nil
	}
	var last error
	consistently(t, 3*time.Second, func() bool { last = untouched(); return last == nil }, func() string {
		return fmt.Sprintf("Global lock: %v; status: %s", last, describe(f.get("global")))
	})

	// The admission policy sets the finalizer on every new lock once it is loaded, which can
	// lag the suite's start: set it here otherwise, so that the deletion below needs it dropped.
	f.editLock("global", func(l *lockv1.DistributedLock) { controllerutil.AddFinalizer(l, lockv1.Finalizer) })
	l := f.get("global")
	if err := k8s.Delete(bg(), l); err != nil {
		t.Fatalf("delete the Global lock: %v", err)
	}
	eventually(t, 10*time.Second, func() bool {
		err := k8s.Get(bg(), client.ObjectKeyFromObject(l), &lockv1.DistributedLock{})
		return apierrors.IsNotFound(err)
	}, func() string { return "the deleted Global lock is still there: " + describe(f.get("global")) })
	if h := f.get("plain"); h.Status.Holder != "p1" {
		t.Errorf("the cluster-scoped lock lost its holder: %s", describe(h))
	}
}
