package controllers_test

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestTokenRegressionGrantsNothing: status says tokens up to 10^12 were published (etcd was
// restored from an old backup): the controller grants nothing and says why.
func TestTokenRegressionGrantsNothing(t *testing.T) {
	f := newFixture(t)
	f.stop() // set the status before any controller sees the lock
	f.lock("lock", "a", nil)
	l := f.get("lock")
	l.Status = lockv1.DistributedLockStatus{Phase: lockv1.PhasePending, MaxFencingToken: 1_000_000_000_000, ControllerEpoch: 1}
	if err := k8s.Status().Update(bg(), l); err != nil {
		t.Fatalf("seed status: %v", err)
	}
	f.stop = f.startController("replica-b", 3*time.Second)
	f.pod("a-0", "a")
	got := f.waitFor("lock", 20*time.Second, "Valid=False TokenRegression", func(l *lockv1.DistributedLock) bool {
		for _, c := range l.Status.Conditions {
			if c.Type == lockv1.ConditionValid && c.Status == "False" && c.Reason == lockv1.ReasonTokenRegression {
				return true
			}
		}
		return false
	})
	if got.Status.Holder != "" || got.Status.FencingToken != 0 {
		t.Errorf("holder %q token %d, want no grant", got.Status.Holder, got.Status.FencingToken)
	}
	if tok := f.keyToken("lock"); tok != 0 {
		t.Errorf("etcd key token %d, want no key", tok)
	}
	if got.Status.MaxFencingToken != 1_000_000_000_000 {
		t.Errorf("maxFencingToken = %d, want unchanged", got.Status.MaxFencingToken)
	}
}

// TestSteadyStateWritesNothing: a held lock observed for 5 x TTL gets no status update.
func TestSteadyStateWritesNothing(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a")
	f.pod("a-1", "a")
	f.lock("lock", "a", nil)
	held := f.waitFor("lock", 20*time.Second, "held with both candidates counted", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseHeld && l.Status.EligibleCandidates == 2
	})
	w, err := k8s.Watch(bg(), &lockv1.DistributedLockList{}, client.InNamespace(f.ns))
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	// 5 x the 2 s lease: several renewal and ownership-check rounds of the grant lease.
	timeout := time.After(10 * time.Second)
	updates := 0
	for {
		select {
		case ev := <-w.ResultChan():
			if l, ok := ev.Object.(*lockv1.DistributedLock); ok && ev.Type == watch.Modified && l.ResourceVersion != held.ResourceVersion {
				updates++
				t.Errorf("update %d in steady state: %s", updates, describe(l))
			}
		case <-timeout:
			if updates != 0 {
				t.Errorf("%d status updates in 10 s of steady state, want 0", updates)
			}
			return
		}
	}
}

// TestTokenRegressionKeyBelowPublished: etcd holds a grant whose token is below the token
// status already published (etcd was restored from an older snapshot): the controller
// neither publishes that grant nor grants anew, and says why.
func TestTokenRegressionKeyBelowPublished(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a")
	f.lock("lock", "a", nil)
	held := f.waitFor("lock", 20*time.Second, "held", heldBy("a-0"))
	f.stop()
	const published = 1_000_000_000_000
	l := f.get("lock")
	l.Status.FencingToken, l.Status.MaxFencingToken = published, published
	if err := k8s.Status().Update(bg(), l); err != nil {
		t.Fatalf("seed status: %v", err)
	}
	f.stop = f.startController("replica-b", 3*time.Second)
	got := f.waitFor("lock", 20*time.Second, "Valid=False TokenRegression", condition(lockv1.ConditionValid, "False"))
	for _, c := range got.Status.Conditions {
		if c.Type == lockv1.ConditionValid && c.Reason != lockv1.ReasonTokenRegression {
			t.Errorf("Valid reason = %s, want %s", c.Reason, lockv1.ReasonTokenRegression)
		}
	}
	if got.Status.FencingToken != published || got.Status.MaxFencingToken != published {
		t.Errorf("status token %d max %d, want both still %d", got.Status.FencingToken, got.Status.MaxFencingToken, published)
	}
	if tok := f.keyToken("lock"); tok != held.Status.FencingToken {
		t.Errorf("etcd token = %d, want the old grant %d untouched", tok, held.Status.FencingToken)
	}
}

// TestStaleKeyAfterRestore: etcd holds a grant older than the published term (a snapshot
// restored). Without the documented bump the lock stays in TokenRegression even once etcd's
// revision passes the published tokens; after the bump (history compacted past every
// published token) the controller deletes the stale grant and grants anew with a larger
// token (found by the fault-injection suite, seed 1 run 17, where the lock never recovered).
func TestStaleKeyAfterRestore(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a")
	f.lock("lock", "a", nil)
	held := f.waitFor("lock", 20*time.Second, "held", heldBy("a-0"))
	f.stop()
	// Status names a later term than the key in etcd, as after a restore of an older snapshot.
	l := f.get("lock")
	published := held.Status.FencingToken + 1
	l.Status.FencingToken, l.Status.MaxFencingToken = published, published
	if err := k8s.Status().Update(bg(), l); err != nil {
		t.Fatalf("seed status: %v", err)
	}
	// etcd's revision moves past every published token, with no compaction: not the bump.
	var rev int64
	for i := range 5 {
		resp, err := f.cli.Put(bg(), f.prefix+"/test/bump", strconv.Itoa(i))
		if err != nil {
			t.Fatalf("put: %v", err)
		}
		rev = resp.Header.Revision
	}
	f.stop = f.startController("replica-b", 3*time.Second)
	f.waitFor("lock", 20*time.Second, "Valid=False TokenRegression", condition(lockv1.ConditionValid, "False"))
	// A wrong grant would come at once; give it 2 s to show.
	var got *lockv1.DistributedLock
	var tok int64
	consistently(t, 2*time.Second, func() bool {
		got, tok = f.get("lock"), f.keyToken("lock")
		return got.Status.FencingToken == published && tok == held.Status.FencingToken
	}, func() string {
		return fmt.Sprintf("without the bump: %s, etcd token %d; want no grant, the stale key kept", describe(got), tok)
	})

	// The bump's --mark-compacted: history up to the current revision is gone.
	if _, err := f.cli.Compact(bg(), rev); err != nil {
		t.Fatalf("compact: %v", err)
	}
	next := f.waitFor("lock", 30*time.Second, "held with a token above the published one", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseHeld && l.Status.FencingToken > published
	})
	if got := f.keyToken("lock"); got != next.Status.FencingToken {
		t.Errorf("etcd token = %d, want the new grant %d", got, next.Status.FencingToken)
	}
	if !condition(lockv1.ConditionValid, "True")(next) {
		t.Errorf("Valid condition not True after recovery: %s", describe(next))
	}
}
