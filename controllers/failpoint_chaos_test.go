//go:build chaos

package controllers_test

import (
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
)

// TestFailpointDroppedStatusAfterGrant: every grant's status write is dropped; the next
// turn finds the unpublished grant in etcd and publishes it as recorded.
func TestFailpointDroppedStatusAfterGrant(t *testing.T) {
	controllers.SetFailpoints(map[string]float64{"drop-status-after-grant": 1})
	t.Cleanup(func() { controllers.SetFailpoints(nil) })
	f := newFixture(t)
	f.pod("a-0", "a")
	f.lock("lock", "a", nil)
	l := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	if got := f.keyToken("lock"); got != l.Status.FencingToken {
		t.Errorf("etcd token = %d, want the published %d", got, l.Status.FencingToken)
	}
}

// TestFailpointLostReleaseReply: the release of an attested holder commits but its reply is
// reported lost; the next turn re-reads, ends the term and grants the next pod at once.
func TestFailpointLostReleaseReply(t *testing.T) {
	controllers.SetFailpoints(map[string]float64{"lose-release-reply": 1})
	t.Cleanup(func() { controllers.SetFailpoints(nil) })
	f := newFixture(t)
	a0 := f.pod("a-0", "a")
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](600) })
	first := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	f.terminate(a0)
	next := f.waitFor("lock", 30*time.Second, "held by a-1 without the lock delay", heldBy("a-1"))
	if next.Status.FencingToken <= first.Status.FencingToken {
		t.Errorf("token = %d, want > %d", next.Status.FencingToken, first.Status.FencingToken)
	}
	if got := f.keyToken("lock"); got != next.Status.FencingToken {
		t.Errorf("etcd token = %d, want %d", got, next.Status.FencingToken)
	}
}
