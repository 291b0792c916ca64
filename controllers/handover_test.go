package controllers_test

import (
	"fmt"
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
)

// TestStandbyTakesOverWithoutTransition: the active replica stops (graceful shutdown
// releases the election, never the grants); the standby, waiting in the queue, takes over
// with a higher epoch, adopts the grant and changes no term. A later change shows it is
// the one reconciling.
func TestStandbyTakesOverWithoutTransition(t *testing.T) {
	f := newFixture(t)
	stopB := f.startController("replica-b", 3*time.Second) // standby
	t.Cleanup(stopB)
	a0 := f.pod("a-0", "a")
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", nil)
	first := f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
	epochA := first.Status.ControllerEpoch

	election, err := f.engine.Inspect(bg(), controllers.ElectionKey)
	if err != nil || election.Token != epochA {
		t.Fatalf("election = %+v (err %v), want the epoch %d in status", election, err, epochA)
	}
	stops := map[string]func(){"replica-a": f.stop, "replica-b": stopB}
	standby := map[string]string{"replica-a": "replica-b", "replica-b": "replica-a"}[election.Holder]
	if standby == "" {
		t.Fatalf("election holder = %q, want replica-a or replica-b", election.Holder)
	}
	stops[election.Holder]() // the active replica shuts down
	eventually(t, 10*time.Second, func() bool {
		election, err = f.engine.Inspect(bg(), controllers.ElectionKey)
		return err == nil && election.Holder == standby
	}, func() string { return fmt.Sprintf("%s elected (holder %q, err %v)", standby, election.Holder, err) })
	if election.Token <= epochA {
		t.Errorf("epoch of the standby = %d, want > %d", election.Token, epochA)
	}
	// No term changed: same holder, token and transitions, and the key is untouched.
	same := f.get("lock")
	if same.Status.FencingToken != first.Status.FencingToken || same.Status.Transitions != first.Status.Transitions {
		t.Errorf("after takeover: token %d transitions %d, want %d %d", same.Status.FencingToken, same.Status.Transitions, first.Status.FencingToken, first.Status.Transitions)
	}
	if got := f.keyToken("lock"); got != first.Status.FencingToken {
		t.Errorf("etcd token = %d, want %d", got, first.Status.FencingToken)
	}
	// The new replica reconciles: an attested exit moves the lock on, under its epoch.
	f.terminate(a0)
	next := f.waitFor("lock", 20*time.Second, "held by a-1", heldBy("a-1"))
	if next.Status.ControllerEpoch != election.Token {
		t.Errorf("controllerEpoch = %d, want the new replica's %d", next.Status.ControllerEpoch, election.Token)
	}
	if next.Status.FencingToken <= first.Status.FencingToken {
		t.Errorf("token = %d, want > %d", next.Status.FencingToken, first.Status.FencingToken)
	}
}

// TestEtcdOutageFlipsCondition: etcd stops for less than the election's validity:
// EtcdAvailable goes False, the held lock keeps its phase, holder and token; when etcd is
// back the condition recovers.
func TestEtcdOutageFlipsCondition(t *testing.T) {
	f := newFixture(t)
	f.stop()
	f.stop = f.startController("replica-long", outageElectionTTL)
	f.pod("a-0", "a")
	f.lock("lock", "a", nil)
	first := f.waitFor("lock", 20*time.Second, "held", heldBy("a-0"))

	down, up := f.etcdOutage("lock")
	if down.Status.Phase != lockv1.PhaseHeld || down.Status.Holder != "a-0" || down.Status.FencingToken != first.Status.FencingToken {
		t.Errorf("during outage: %s; want Held by a-0 with token %d", describe(down), first.Status.FencingToken)
	}
	if up.Status.Phase != lockv1.PhaseHeld || up.Status.FencingToken != first.Status.FencingToken {
		t.Errorf("after outage: %s; want Held with token %d", describe(up), first.Status.FencingToken)
	}
}

// outageElectionTTL is the election TTL of a replica that must outlive an etcd outage of up
// to 30 s: the outage, then etcd's client reconnecting after it, when gRPC's reconnect
// backoff (1 s growing by 1.6 up to 120 s, jittered) may wait another ~10 s. At 20 s the
// session lapsed on a loaded CI machine (TestReview22EtcdOutageFlipsSlotCondition, stop 29)
// and the manager stopped with "controller election lost", leaving nobody to write the
// recovery.
const outageElectionTTL = 60 * time.Second

// outageRecovery bounds the condition's recovery after etcd restarts: the client's reconnect
// backoff, then the probe's tick (outageElectionTTL/5), then a turn.
const outageRecovery = 60 * time.Second

// etcdOutage stops the controller's etcd until lock shows EtcdAvailable=False, then starts it
// again and waits for EtcdAvailable=True; it returns the lock as seen at each (down, then
// up). Should the test end before the restart, its cleanup starts etcd again.
func (f *fixture) etcdOutage(lock string) (down, up *lockv1.DistributedLock) {
	f.t.Helper()
	etcd.Stop()
	restarted := false
	f.t.Cleanup(func() {
		if !restarted {
			_ = etcd.Start()
		}
	})
	// Bounded by the probe's tick (election-ttl/5 = 12 s) and timeout (2 s), then the turn's
	// own etcd read timing out (5 s).
	down = f.waitFor(lock, 30*time.Second, "EtcdAvailable=False", condition(lockv1.ConditionEtcdAvailable, "False"))
	if err := etcd.Start(); err != nil {
		f.t.Fatalf("restart etcd: %v", err)
	}
	restarted = true
	return down, f.waitFor(lock, outageRecovery, "EtcdAvailable=True", condition(lockv1.ConditionEtcdAvailable, "True"))
}

func condition(typ, status string) func(*lockv1.DistributedLock) bool {
	return func(l *lockv1.DistributedLock) bool {
		for _, c := range l.Status.Conditions {
			if c.Type == typ {
				return string(c.Status) == status
			}
		}
		return false
	}
}
