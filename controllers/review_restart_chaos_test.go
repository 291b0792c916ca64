//go:build chaos

package controllers_test

import (
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
)

// TestFailpointRestartFastPathStatusDropped (review of 0ad4f85): the fast path's grant
// commits but its status write is lost; the next turn adopts the same pod's unpublished
// grant. The published history must still say that the old term ended because the holder
// restarted, and the HolderRestarted Event must be emitted. On 0ad4f85 adopt closes the term
// as KeyVanished and the Event (queued for the lost write) never comes. Run with
// -tags chaos (make test runs `-tags chaos -run Failpoint`).
func TestFailpointRestartFastPathStatusDropped(t *testing.T) {
	f := newFixture(t)
	a0, held := f.heldByFirstOfTwo()
	controllers.SetFailpoints(map[string]float64{"drop-status-after-grant": 1})
	t.Cleanup(func() { controllers.SetFailpoints(nil) })
	f.restarted(a0, 1)
	back := f.waitFor("lock", 20*time.Second, "Held by a-0 with a new token", func(l *lockv1.DistributedLock) bool {
		return heldBy("a-0")(l) && l.Status.FencingToken > held.Status.FencingToken
	})
	if ended := back.Status.History[1]; ended.Token != held.Status.FencingToken || ended.Reason != lockv1.ReasonHolderRestarted {
		t.Errorf("the restarted term ended as %+v, want token %d ended %s", ended, held.Status.FencingToken, lockv1.ReasonHolderRestarted)
	}
	f.waitEventMessage(t, lockv1.ReasonHolderRestarted)
}
