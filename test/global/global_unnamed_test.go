package global_test

import (
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
)

// TestGlobalLocksUnnamedDeleted: a Global lock held under a manager with --cluster-name is
// deleted while a manager WITHOUT one runs (its cluster name removed by a rollout). That
// manager grants nothing, but the holder pod's last reads keep it valid by R5 up to
// S + D - m: the lock may go only after the published delay, counted from the unnamed
// manager's first read of it (before the fix it went at once).
func TestGlobalLocksUnnamedDeleted(t *testing.T) {
	s, b, _, p1 := oneCluster(t, "unnamed-", "app", "unnamed.example.com")
	ns := s.ns
	h := pollHolder(t, s, "x")

	held := waitSide(t, s, "x", 15*time.Second, "held with round 4", func(st *lockv1.DistributedLockStatus) bool {
		return heldHereBy(p1)(st) && st.GlobalRound >= 4
	})
	s.stop()
	if err := k8s.Delete(bg(), held); err != nil {
		t.Fatalf("delete the lock: %v", err)
	}
	bound := h.bound(t, held)
	s.stop = controllertest.Start(t, s.cfg.Config, controllertest.Config{Namespace: ns, Engine: b.Engine, Identity: "east-unnamed"})
	t.Cleanup(s.stop)
	goneAt := h.waitGone(t, 25*time.Second)
	if goneAt.Before(bound) {
		t.Errorf("the deleted lock was gone at %s, %v before the end of pod p1's term by R5 (%s; D %d s): the unnamed manager dropped the finalizer while the term could be valid",
			goneAt.Format("15:04:05.000"), bound.Sub(goneAt).Round(time.Millisecond), bound.Format("15:04:05.000"), held.Status.GlobalLockDelaySeconds)
	}
}
