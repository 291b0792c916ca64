package global_test

import (
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Review rev-ctl of the wired Global lock controller (ac41631), where the I/O matters.

// r5Bound is the R5 bound of the holder in the newest of reads (oldest first): S + D - m,
// S the send time of the newest read of the same object showing a round at most r-2.
func r5Bound(reads []podRead) (time.Time, bool) {
	if len(reads) == 0 {
		return time.Time{}, false
	}
	last := reads[len(reads)-1]
	st := &last.st
	if !heldHere(st) || st.FencingToken != st.GlobalToken || st.GlobalToken == 0 {
		return time.Time{}, false
	}
	d := time.Duration(st.GlobalLockDelaySeconds) * time.Second
	m := max(2*time.Second, d/50)
	for j := len(reads) - 1; j >= 0; j-- {
		if r := reads[j]; r.uid == last.uid && r.st.GlobalRound <= st.GlobalRound-2 {
			return r.sent.Add(d - m), true
		}
	}
	return time.Time{}, false
}

// TestReviewCtlGlobalDeletedAfterLapse: the holder cluster's manager is away (stopped) while
// its grant's lease lapses (revoked here: lease expiry is no bound) and the user deletes the
// lock. The manager comes back. The holder pod's reads showed its term Held with rounds up
// to the stop, so by R5 it leads until S + D - m. The manager's finalizer must keep the lock
// until then (DESIGN.md's lifecycle: a deleted lock goes only after Releasing and the delay;
// global_turn.go: "deleting a lock that holds the global term then ends it ... before it
// goes"): once it is gone, a lock of the same name created again with another globalName
// (immutable, so delete and re-create is how a user changes it) is granted at once by R6'.
func TestReviewCtlGlobalDeletedAfterLapse(t *testing.T) {
	s, b, g, p1 := oneCluster(t, "revctl-", "old", "old.example.com")
	ns := s.ns
	h := pollHolder(t, s, "x") // the holder pod's reads

	held := waitSide(t, s, "x", 15*time.Second, "held with round 4", func(st *lockv1.DistributedLockStatus) bool {
		return heldHereBy(p1)(st) && st.GlobalRound >= 4
	})
	s.stop()
	v, err := g.Observe(bg(), "old.example.com")
	if err != nil || !v.Held || v.Token != held.Status.FencingToken {
		t.Fatalf("observe K: %+v, %v", v, err)
	}
	if err := k8s.Delete(bg(), held); err != nil {
		t.Fatalf("delete the lock: %v", err)
	}
	if _, err := b.Client.Revoke(bg(), v.Lease); err != nil {
		t.Fatalf("revoke K's lease (its expiry): %v", err)
	}
	bound := h.bound(t, held)
	restarted := time.Now()
	s.stop = controllertest.Start(t, s.cfg.Config, controllertest.Config{
		Namespace: ns, Engine: b.Engine, Identity: "east-manager", ClusterName: "east", Global: g,
	})
	t.Cleanup(s.stop)
	goneAt := h.waitGone(t, 25*time.Second)
	t.Logf("manager restarted %v before the pod's R5 bound; the lock gone %v after the restart", bound.Sub(restarted).Round(time.Millisecond), goneAt.Sub(restarted).Round(time.Millisecond))
	if goneAt.Before(bound) {
		t.Errorf("the deleted lock was gone at %s, %v before the end of pod p1's term by R5 (%s; token %d, round %d, D %d s): the finalizer dropped while the term could be valid",
			goneAt.Format("15:04:05.000"), bound.Sub(goneAt).Round(time.Millisecond), bound.Format("15:04:05.000"), held.Status.FencingToken, held.Status.GlobalRound, held.Status.GlobalLockDelaySeconds)
		// The consequence: the same lock created again under another global name.
		p2 := s.pod("p2", "new")
		s.lock("x", "new", "new.example.com")
		var newReads []podRead
		eventually(t, 10*time.Second, func() bool {
			sent := time.Now()
			l, err := s.get("x")
			if err != nil {
				return false
			}
			newReads = append(newReads, podRead{sent: sent, uid: l.UID, st: *l.Status.DeepCopy()})
			_, ok := r5Bound(newReads)
			return ok && l.Status.GlobalHolderUID == p2.UID
		}, func() string { return "the re-created lock is not held by p2" })
		if at := newReads[len(newReads)-1].sent; at.Before(bound) {
			t.Errorf("pod p2 of the re-created lock x (globalName new.example.com) leads by R5 from %s, %v after the old lock went and %v before p1's bound: a pod of p1's term reading every L/3 = 2 s may still lead",
				at.Format("15:04:05.000"), at.Sub(goneAt).Round(time.Millisecond), bound.Sub(at).Round(time.Millisecond))
		}
	}
}

// TestReviewCtlGlobalReplacedEtcd: the shared etcd is replaced (a new etcd, or a restore from
// an older backup) under a held Global lock. docs/global.md leaves restores out of the model
// but says "the token-regression rules of DESIGN.md apply", and DESIGN.md's is: etcd showing
// a token at or below status.maxFencingToken that is not the published one, or a controller
// epoch below status.controllerEpoch: grant nothing for that lock, report TokenRegression.
// The in-cluster reconciler does; here the status shows token t1 and the new etcd has never
// seen T, so R6' grants at once with a token below t1: the fencing token goes down.
func TestReviewCtlGlobalReplacedEtcd(t *testing.T) {
	ns := fixtureNamespace(t, "revctl-").Name
	prefix := fmt.Sprintf("/lockwarden-test-global/%d", globalPrefixes.Add(1))
	b := controllertest.NewBackend(t, etcd.Endpoint)
	for i := range 100 { // the suite's etcd well above a fresh one's revisions
		if _, err := b.Client.Put(bg(), b.Prefix+"/revctl-filler", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	g, err := lease.NewGlobal(b.Client, prefix)
	if err != nil {
		t.Fatal(err)
	}
	s := &clusterSide{t: t, name: "east", cfg: env, c: k8s, ns: ns, backend: b, global: g}
	p1 := s.pod("p1", "app")
	s.lock("x", "app", "replaced.example.com")
	s.start()
	l := waitSide(t, s, "x", 15*time.Second, "held", heldHereBy(p1))
	t1 := l.Status.FencingToken
	s.stop()

	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	e2, err := testenv.StartEtcd(root, t.TempDir())
	if err != nil {
		t.Fatalf("the replacing etcd: %v", err)
	}
	t.Cleanup(e2.Stop)
	b2 := controllertest.NewBackend(t, e2.Endpoint)
	g2, err := lease.NewGlobal(b2.Client, prefix)
	if err != nil {
		t.Fatal(err)
	}
	s.stop = controllertest.Start(t, s.cfg.Config, controllertest.Config{
		Namespace: ns, Engine: b2.Engine, Identity: "east-manager", ClusterName: "east", Global: g2,
	})
	t.Cleanup(s.stop)
	consistently(t, 8*time.Second, func() bool {
		l, err := s.get("x")
		return err != nil || !heldHere(&l.Status) || l.Status.FencingToken >= t1
	}, func() string {
		l, _ := s.get("x")
		return fmt.Sprintf("after the shared etcd was replaced, the lock is held here with a token below the published %d (maxFencingToken %d): %s",
			t1, l.Status.MaxFencingToken, describeGlobal(&l.Status))
	})
}

// TestReviewCtlGlobalBadRecord pins Observe's errors: a tombstone whose record does not
// parse is never read as "T never written" (R6' would grant at once, with no wait for the
// grant that record may stand for); the lock is not granted and says the etcd read failed.
func TestReviewCtlGlobalBadRecord(t *testing.T) {
	ns := fixtureNamespace(t, "revctl-").Name
	b := controllertest.NewBackend(t, etcd.Endpoint)
	g, err := lease.NewGlobal(b.Client, fmt.Sprintf("/lockwarden-test-global/%d", globalPrefixes.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Client.Put(bg(), g.TombstonePath("bad.example.com"), `{"kind":"grant","cluster":`); err != nil {
		t.Fatal(err)
	}
	s := &clusterSide{t: t, name: "east", cfg: env, c: k8s, ns: ns, backend: b, global: g}
	s.pod("p1", "app")
	s.lock("x", "app", "bad.example.com")
	s.start()
	waitSide(t, s, "x", 10*time.Second, "EtcdAvailable=False", func(st *lockv1.DistributedLockStatus) bool {
		c := meta.FindStatusCondition(st.Conditions, lockv1.ConditionEtcdAvailable)
		return c != nil && c.Status == metav1.ConditionFalse
	})
	consistently(t, 3*time.Second, func() bool {
		l, err := s.get("x")
		v, _ := b.Client.Get(bg(), g.GrantPath("bad.example.com"))
		return err == nil && !heldHere(&l.Status) && l.Status.GlobalRound == 0 && v != nil && len(v.Kvs) == 0
	}, func() string { return "a lock whose tombstone does not parse was granted" })
}

// TestReviewCtlGlobalLeaseRaised: spec.leaseDurationSeconds is mutable. Raised mid-term from
// 6 to 21 (lockDelaySeconds unset: 42 s), the rounds and so the keepalives go every 7 s
// (P0 from the spec now), while the grant's lease keeps the TTL it was granted with (G = 6 s)
// and K's record keeps D = 12 s. Liveness only: the term should go on under its token.
func TestReviewCtlGlobalLeaseRaised(t *testing.T) {
	ns := fixtureNamespace(t, "revctl-").Name
	b := controllertest.NewBackend(t, etcd.Endpoint)
	g, err := lease.NewGlobal(b.Client, fmt.Sprintf("/lockwarden-test-global/%d", globalPrefixes.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	s := &clusterSide{t: t, name: "east", cfg: env, c: k8s, ns: ns, backend: b, global: g}
	p1 := s.pod("p1", "app")
	s.lock("x", "app", "raised.example.com")
	s.start()
	l := waitSide(t, s, "x", 15*time.Second, "held", heldHereBy(p1))
	t1 := l.Status.FencingToken
	eventually(t, 5*time.Second, func() bool {
		cur, err := s.get("x")
		if err != nil {
			return false
		}
		cur.Spec.LeaseDurationSeconds = 21
		return s.c.Update(bg(), cur) == nil
	}, func() string { return "raise leaseDurationSeconds" })
	consistently(t, 16*time.Second, func() bool {
		v, err := g.Observe(bg(), "raised.example.com")
		return err == nil && v.Held && v.Token == t1
	}, func() string {
		v, err := g.Observe(bg(), "raised.example.com")
		cur, _ := s.get("x")
		return fmt.Sprintf("the grant with token %d lapsed after leaseDurationSeconds was raised to 21: K held %v token %d (%v); status %s", t1, v.Held, v.Token, err, describeGlobal(&cur.Status))
	})
}

// TestReviewCtlGlobalRecreatedSameName pins F2/C5 for a re-created object: the holder's lock
// loses its finalizer by hand while its grant stands, and a lock of the same name and
// globalName is created again (a new UID) over another pod. T still holds the old object's
// grant: no R8, no adoption of K; the new object waits D after K is gone (R7).
func TestReviewCtlGlobalRecreatedSameName(t *testing.T) {
	ns := fixtureNamespace(t, "revctl-").Name
	b := controllertest.NewBackend(t, etcd.Endpoint)
	g, err := lease.NewGlobal(b.Client, fmt.Sprintf("/lockwarden-test-global/%d", globalPrefixes.Add(1)))
	if err != nil {
		t.Fatal(err)
	}
	s := &clusterSide{t: t, name: "east", cfg: env, c: k8s, ns: ns, backend: b, global: g}
	p1 := s.pod("p1", "old")
	s.lock("x", "old", "same.example.com")
	grants := watchGrant(t, s, "same.example.com")
	s.start()
	old := waitSide(t, s, "x", 15*time.Second, "held", heldHereBy(p1))
	s.stop()
	old.Finalizers = nil
	if err := k8s.Update(bg(), old); err != nil {
		t.Fatalf("drop the finalizer by hand: %v", err)
	}
	if err := k8s.Delete(bg(), old); err != nil {
		t.Fatalf("delete: %v", err)
	}
	p2 := s.pod("p2", "new")
	eventually(t, 10*time.Second, func() bool {
		_, err := s.get("x")
		return apierrors.IsNotFound(err)
	}, func() string { return "the old lock is still there" })
	s.lock("x", "new", "same.example.com")
	s.stop = controllertest.Start(t, s.cfg.Config, controllertest.Config{
		Namespace: ns, Engine: b.Engine, Identity: "east-manager", ClusterName: "east", Global: g,
	})
	t.Cleanup(s.stop)
	l := waitSide(t, s, "x", globalG+globalD+8*time.Second, "the new object held by p2", heldHereBy(p2))
	if l.Status.FencingToken <= old.Status.FencingToken {
		t.Fatalf("the new object's token %d is not above the old %d", l.Status.FencingToken, old.Status.FencingToken)
	}
	deleted, granted := grants.gapBefore(t, l.Status.FencingToken)
	if gap := granted.Sub(deleted); gap < globalD-watchLag {
		t.Errorf("the re-created lock was granted %v after the old object's K was gone; want at least D = %v", gap, globalD)
	}
}
