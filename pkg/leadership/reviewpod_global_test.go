package leadership_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// The adversarial review of the pod side of Global locks (rev-pod), on a real API server.
// The tests play the controller with the admin client, as global_test.go does (L = 6 s,
// D = 12 s, m = 2 s).

// slowTransport holds every consistent read of the lock at path for delay before sending it
// on: the API server linearizes it delay after the elector read its clock.
type slowTransport struct {
	path  string
	delay time.Duration
	next  http.RoundTripper
}

func (st slowTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if lockGet(req, st.path) {
		time.Sleep(st.delay)
	}
	return st.next.RoundTrip(req)
}

// WrappedRoundTripper lets client-go find the transports under this one.
func (st slowTransport) WrappedRoundTripper() http.RoundTripper { return st.next }

// slow makes c's lock reads wait delay before they are sent on (outside every other wrapper,
// so roundReads records the time the read left for the API server).
func slow(c *rest.Config, path string, delay time.Duration) {
	c.Wrap(func(next http.RoundTripper) http.RoundTripper {
		return slowTransport{path: path, delay: delay, next: next}
	})
}

// TestReviewPodGlobalSendTimeBeforeSlowRequest: S is the pod's clock before the request was
// sent, not any later time. Every read waits 800 ms in the client before it goes to the API
// server, so the read that showed round 1 was linearized at least 800 ms after the pod's S;
// the pod must stop by (the time that read left) - 800 ms + D - m, and a bound taken from
// any time after the request left would pass it.
func TestReviewPodGlobalSendTimeBeforeSlowRequest(t *testing.T) {
	const hold = 800 * time.Millisecond
	h, rounds := newGlobalHarness(t, 6)
	setStatus(t, h.key, pending)
	cfg := globalConfig(h, rounds)
	slow(cfg.Config, h.reads.path, hold)
	el := h.run(t, cfg)
	rounds.waitRound(t, 1, time.Time{}, 10*time.Second)
	w2 := time.Now()
	setStatus(t, h.key, globalHeld(globalToken, globalToken, 12, 6))
	rounds.waitRound(t, 2, w2, 5*time.Second)
	setStatus(t, h.key, round(globalToken, 12))
	eventually(t, 5*time.Second, el.Valid, func() string { return "not leading after rounds 2 and 3" })
	// No round lands any more: the bound is S + 10 s, S the pod's send time of its newest read
	// of round 1, which left for the API server at left1, at least 800 ms after S.
	left1 := rounds.newestAtOrBelow(t, 1)
	latest := left1.Add(10*time.Second - hold)
	for el.Valid() {
		if vu := el.ValidUntil(); vu.After(latest.Add(5 * time.Millisecond)) {
			t.Fatalf("ValidUntil = (round 1's read left) + %v; want at most + %v: S is not the send time before the request", vu.Sub(left1), 10*time.Second-hold)
		}
		if time.Now().After(latest.Add(2 * time.Second)) {
			t.Fatalf("still leading at (round 1's read left) + %v", time.Since(left1).Round(time.Millisecond))
		}
		time.Sleep(10 * time.Millisecond)
	}
	stopped := time.Now()
	if d := stopped.Sub(latest); d > 300*time.Millisecond || d < -1500*time.Millisecond {
		t.Errorf("stopped at (round 1's read left) + %v, want about + %v (the global bound)", stopped.Sub(left1).Round(time.Millisecond), 10*time.Second-hold)
	}
	h.rec.waitEvents(t, "holder(pod-a,200) start(200) stop")
}

// TestReviewPodGlobalValidUntilMovesEarlierWithinOneTerm pins a property every consumer of
// ValidUntil must handle: within ONE open term (same token, no stop), the global bound can
// move earlier. Here round 4 vouches for another token (999) and round 5 for the term's token
// again with a lower lock delay (5 s: the CRD lets the delay change with the token); R5 takes
// the lowest delay shown for the token and the newest read at or below r - 2 = 3, so the
// bound drops from about (the newest read) + 4.5 s to (round 3's read) + 3 s while the term
// stays open. (The in-cluster bound alone never moved earlier within a term.)
// lockwarden-agent exec re-reads ValidUntil only when its own timer fires (ValidUntil - grace
// as last seen) and, when the term ends, stops its child with SIGKILL at the earlier of
// now + grace and the LAST ValidUntil it saw - killLead: a child can outlive the moved bound
// by up to --grace. No controller in this repo publishes such rounds yet (the real one vouches
// only for K's token, and a token never comes back), so this is a hazard for the wiring, not
// a reachable overrun today.
func TestReviewPodGlobalValidUntilMovesEarlierWithinOneTerm(t *testing.T) {
	h, rounds := newGlobalHarness(t, 6)
	el, _ := lead(t, h, rounds, 6)
	w4 := time.Now()
	setStatus(t, h.key, round(999, 12))
	rounds.waitRound(t, 4, w4, 5*time.Second)
	time.Sleep(time.Second)
	before := el.ValidUntil()
	if !el.Valid() || el.Token() != globalToken {
		t.Fatalf("not leading token %d after round 4 vouched for another token (the bound is from round 3)", globalToken)
	}
	w5 := time.Now()
	setStatus(t, h.key, round(globalToken, 5))
	rounds.waitRound(t, 5, w5, 5*time.Second)
	var after time.Time
	eventually(t, 2*time.Second, func() bool {
		after = el.ValidUntil()
		return !after.IsZero() && after.Before(before.Add(-time.Second))
	}, func() string {
		return fmt.Sprintf("ValidUntil %v after round 5's lower delay, %v before: it did not move earlier", after.Sub(w5), before.Sub(w5))
	})
	if !el.Valid() || el.Token() != globalToken {
		t.Fatalf("the term ended instead of its bound moving earlier: %s", h.rec)
	}
	if got := h.rec.String(); got != "holder(pod-a,200) start(200)" {
		t.Fatalf("callbacks %q: the term was not one open term while its bound moved earlier", got)
	}
	t.Logf("within one term ValidUntil moved from w5 + %v to w5 + %v", before.Sub(w5).Round(time.Millisecond), after.Sub(w5).Round(time.Millisecond))
	eventually(t, 8*time.Second, func() bool { return !el.Valid() }, func() string { return "still leading after the moved bound" })
	if d := time.Since(after); d > 300*time.Millisecond {
		t.Errorf("stopped %v after the moved bound", d.Round(time.Millisecond))
	}
	h.rec.waitEvents(t, "holder(pod-a,200) start(200) stop")
}

// TestReviewPodGlobalRecreatedAcrossScopesTokenLineage: spec.scope is immutable, so a lock
// moves between scopes only by being deleted and created again under its name. The tokens of
// the two objects come from two etcd clusters (the cluster's engine, the shared etcd), so they
// are not ordered; yet this process compares the tokens it abandoned or released with every
// later grant's by number, on any object. Here pod-a leads the Cluster lock under engine token
// 5000 and abandons it; the lock is deleted and created again as a Global lock, whose grant to
// pod-a is shared-etcd token 200 with rounds 2 and 3 vouching for it: the pod must lead it (a
// new object, a new lineage), and never does (200 <= 5000: judged abandoned). A token released
// instead of abandoned is judged grantResend: the pod sends a release for the new grant it
// never led. Liveness, until the process restarts; F6's "token lineages mix" reappears through
// the delete and create that the immutable scope asks for.
func TestReviewPodGlobalRecreatedAcrossScopesTokenLineage(t *testing.T) {
	ns := namespace(t)
	key := createLock(t, ns, "leader", 6)
	h := harnessFor(t, key)
	rounds := &roundReads{path: h.reads.path}
	setStatus(t, h.key, held("pod-a", globalMe, 5000, 6))
	el := h.run(t, globalConfig(h, rounds))
	eventually(t, 10*time.Second, func() bool { return el.Token() == 5000 }, func() string { return "not leading the Cluster lock" })
	el.Abandon(5000)
	eventually(t, 2*time.Second, func() bool { return !el.Valid() }, func() string { return "still leading an abandoned term" })

	recreateGlobal(t, h, rounds)
	eventually(t, 5*time.Second, func() bool { return el.Token() == globalToken }, func() string {
		return fmt.Sprintf("pod-a never leads the new Global lock's grant (token %d, rounds 2 and 3) after abandoning token 5000 of the deleted Cluster lock of that name; ReadyzCheck = %v; callbacks %s",
			globalToken, el.ReadyzCheck(nil), h.rec)
	})
}
