package controllers_test

import (
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// churnChecker follows every lock through a watch and checks, as events arrive:
//   - a new holder appears only after the previous holder's termination was attested (by
//     this test), or after Releasing was published and the lock delay elapsed on this test's
//     clock (less deliveryJitter for the watch);
//   - tokens strictly increase from one grant to the next.
type churnChecker struct {
	t         *testing.T
	lockDelay time.Duration
	mu        sync.Mutex
	attested  map[types.UID]bool
	state     map[string]*lockTrack
	grants    int
	problems  []string
}

type lockTrack struct {
	holder         types.UID
	token          int64
	releasingSince time.Time
}

// deliveryJitter bounds how much later the test may see Releasing than the controller's
// acknowledgement, relative to the next grant.
const deliveryJitter = 250 * time.Millisecond

func (c *churnChecker) attest(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attested[uid] = true
}

func (c *churnChecker) observe(l *lockv1.DistributedLock, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := l.Status
	tr := c.state[l.Name]
	if tr == nil {
		tr = &lockTrack{}
		c.state[l.Name] = tr
	}
	switch {
	case s.Phase == lockv1.PhaseReleasing && tr.releasingSince.IsZero():
		tr.releasingSince = at
	case s.Phase == lockv1.PhaseHeld && s.HolderUID != "" && s.FencingToken != tr.token:
		if s.FencingToken <= tr.token {
			c.problems = append(c.problems, fmt.Sprintf("%s: token %d granted after %d", l.Name, s.FencingToken, tr.token))
		}
		if tr.holder != "" && s.HolderUID != tr.holder && !c.attested[tr.holder] {
			switch {
			case tr.releasingSince.IsZero():
				c.problems = append(c.problems, fmt.Sprintf("%s: new holder %s without Releasing after unattested holder %s", l.Name, s.Holder, tr.holder))
			case at.Sub(tr.releasingSince) < c.lockDelay-deliveryJitter:
				c.problems = append(c.problems, fmt.Sprintf("%s: new holder %s %v after Releasing, want >= lock delay %v", l.Name, s.Holder, at.Sub(tr.releasingSince), c.lockDelay))
			}
		}
		tr.holder, tr.token, tr.releasingSince = s.HolderUID, s.FencingToken, time.Time{}
		c.grants++
	case s.Phase == lockv1.PhaseHeld:
		tr.releasingSince = time.Time{} // back to Held, same term
	case s.Phase == lockv1.PhasePending:
		if s.MaxFencingToken > tr.token {
			tr.token = s.MaxFencingToken
		}
	}
}

// TestChurn runs 20 locks x 3 candidates for 60 s with random pod deletions (attested or
// not) and readiness flips, checking the term rules continuously, and that a Held status
// token equals the etcd key's CreateRevision.
func TestChurn(t *testing.T) {
	f := newFixture(t)
	const locks, perLock = 20, 3
	lockDelay := 2 * time.Second
	check := &churnChecker{t: t, lockDelay: lockDelay, attested: map[types.UID]bool{}, state: map[string]*lockTrack{}}

	w, err := k8s.Watch(bg(), &lockv1.DistributedLockList{}, client.InNamespace(f.ns))
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for ev := range w.ResultChan() {
			if l, ok := ev.Object.(*lockv1.DistributedLock); ok && ev.Type != watch.Deleted {
				check.observe(l, time.Now())
			}
		}
	}()

	pods := map[string][]*corev1.Pod{}
	n := 0
	for i := range locks {
		app := fmt.Sprintf("app-%d", i)
		for range perLock {
			pods[app] = append(pods[app], f.pod(fmt.Sprintf("%s-%d", app, n), app))
			n++
		}
		f.lock(fmt.Sprintf("lock-%d", i), app, nil)
	}

	rng := rand.New(rand.NewSource(1))
	end := time.Now().Add(60 * time.Second)
	notReady := map[string]*corev1.Pod{}
	for time.Now().Before(end) {
		app := fmt.Sprintf("app-%d", rng.Intn(locks))
		i := rng.Intn(perLock)
		p := pods[app][i]
		switch r := rng.Intn(10); {
		case r < 3: // deleted without attestation (force delete, lost node)
			f.deletePod(p)
			pods[app][i] = f.pod(fmt.Sprintf("%s-%d", app, n), app)
			n++
		case r < 5: // graceful exit: containers terminated, then deleted
			check.attest(p.UID)
			f.terminate(p)
			f.deletePod(p)
			pods[app][i] = f.pod(fmt.Sprintf("%s-%d", app, n), app)
			n++
		default: // readiness flip
			if _, down := notReady[p.Name]; down {
				f.setReady(p, true)
				delete(notReady, p.Name)
			} else {
				f.setReady(p, false)
				notReady[p.Name] = p
			}
		}
		f.checkHeldTokens(locks)
		time.Sleep(time.Duration(100+rng.Intn(300)) * time.Millisecond)
	}
	w.Stop()
	<-watchDone
	check.mu.Lock()
	defer check.mu.Unlock()
	for _, p := range check.problems {
		t.Error(p)
	}
	if check.grants < locks*2 {
		t.Errorf("%d grants in 60 s of churn, want at least %d (churn too weak to mean anything)", check.grants, locks*2)
	}
	t.Logf("%d grants observed over %d locks", check.grants, locks)
}

// checkHeldTokens checks one random lock: while Held, the status token is the etcd key's
// CreateRevision. A mismatch is a violation only if the status stays unchanged (a grant or
// end in flight changes etcd first, then status).
func (f *fixture) checkHeldTokens(locks int) {
	f.t.Helper()
	name := fmt.Sprintf("lock-%d", rand.Intn(locks))
	before := f.get(name)
	if before.Status.Phase != lockv1.PhaseHeld {
		return
	}
	tok := f.keyToken(name)
	if tok == before.Status.FencingToken {
		return
	}
	time.Sleep(time.Second)
	after := f.get(name)
	if after.ResourceVersion == before.ResourceVersion {
		f.t.Errorf("%s Held with token %d for over 1 s while etcd has %d", name, before.Status.FencingToken, tok)
	}
}
