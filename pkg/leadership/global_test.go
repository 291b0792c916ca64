package leadership_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// Global locks (docs/global.md R5): the tests play the controller of cluster "east" by writing
// status with the admin client, one round per write (the CRD lets globalRound step by 1 only).

const (
	globalMe    = types.UID("pod-a-uid")
	globalOld   = int64(100) // the token of an earlier term, before the pod's grant
	globalToken = int64(200) // the pod's grant
)

// roundRead is one consistent read of a Global lock as the elector's transport saw it.
type roundRead struct {
	sent, done time.Time
	round      int64 // status.globalRound the elector received
}

// roundReads records the consistent reads (GETs, not watches) of one lock with the round each
// showed; with lower set above 0 it rewrites the round of every read's answer to it, as a
// store restored from a backup would answer (the CRD refuses a lower round in a write).
type roundReads struct {
	path  string
	lower atomic.Int64
	mu    sync.Mutex
	all   []roundRead
}

// roundTransport is the client transport that records into r (and rewrites for it).
type roundTransport struct {
	r    *roundReads
	next http.RoundTripper
}

func (rt roundTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !lockGet(req, rt.r.path) {
		return rt.next.RoundTrip(req)
	}
	sent := time.Now()
	resp, err := rt.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err // a failed read shows no round
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var lock lockv1.DistributedLock
	if err := json.Unmarshal(body, &lock); err != nil {
		return nil, fmt.Errorf("test transport: decode lock: %w", err)
	}
	if low := rt.r.lower.Load(); low > 0 {
		lock.Status.GlobalRound = low
		if body, err = json.Marshal(&lock); err != nil {
			return nil, fmt.Errorf("test transport: encode lock: %w", err)
		}
		resp.ContentLength = int64(len(body))
		resp.Header.Del("Content-Length")
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	rt.r.mu.Lock()
	rt.r.all = append(rt.r.all, roundRead{sent: sent, done: time.Now(), round: lock.Status.GlobalRound})
	rt.r.mu.Unlock()
	return resp, nil
}

// wrap makes c's client record its reads into r.
func (r *roundReads) wrap(c *rest.Config) *rest.Config {
	c.Wrap(func(next http.RoundTripper) http.RoundTripper { return roundTransport{r: r, next: next} })
	return c
}

func (r *roundReads) snapshot() []roundRead {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]roundRead(nil), r.all...)
}

// waitRound waits until a read answered after t showed round.
func (r *roundReads) waitRound(tb *testing.T, round int64, after time.Time, timeout time.Duration) roundRead {
	tb.Helper()
	var got roundRead
	eventually(tb, timeout, func() bool {
		for _, rd := range r.snapshot() {
			if rd.round == round && rd.done.After(after) {
				got = rd
				return true
			}
		}
		return false
	}, func() string {
		return fmt.Sprintf("no read answered after the write showed round %d; reads: %v", round, r.snapshot())
	})
	return got
}

// newestAtOrBelow is the send time of the newest read that showed a round at or below round.
func (r *roundReads) newestAtOrBelow(tb *testing.T, round int64) time.Time {
	tb.Helper()
	var s time.Time
	for _, rd := range r.snapshot() {
		if rd.round <= round && rd.sent.After(s) {
			s = rd.sent
		}
	}
	if s.IsZero() {
		tb.Fatalf("no read showed round %d or below; reads: %v", round, r.snapshot())
	}
	return s
}

// newGlobalHarness creates a Global lock of leaseSeconds (lock delay unset: 2L) and a proxy to
// the API server, like newHarness; rounds records the elector's reads with their rounds.
func newGlobalHarness(t *testing.T, leaseSeconds int32) (*harness, *roundReads) {
	t.Helper()
	ns := namespace(t)
	lock := &lockv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: "leader", Namespace: ns},
		Spec: lockv1.DistributedLockSpec{
			Candidates:           lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"app": "worker"})},
			LeaseDurationSeconds: leaseSeconds,
			Scope:                lockv1.ScopeGlobal,
			GlobalName:           "global-leader",
		},
	}
	if err := k8s.Create(t.Context(), lock); err != nil {
		t.Fatalf("create lock: %v", err)
	}
	h := harnessFor(t, client.ObjectKeyFromObject(lock))
	return h, &roundReads{path: h.reads.path}
}

// globalConfig is an elector configuration for pod-a whose reads rounds records.
func globalConfig(h *harness, rounds *roundReads) leadership.Config {
	cfg := h.config("pod-a", globalMe)
	cfg.Config = rounds.wrap(cfg.Config)
	return cfg
}

// pending publishes no term: round 1 vouches for an earlier token (its term over).
func pending(s *lockv1.DistributedLockStatus) {
	s.Phase, s.FencingToken, s.MaxFencingToken = lockv1.PhasePending, 0, globalOld
	s.GlobalRound, s.GlobalToken, s.GlobalLockDelaySeconds = 1, globalOld, 12
}

// globalHeld publishes a term of token held in this cluster ("east") by pod-a, as the next
// round, vouching for roundToken with lock delay delay; the term lease is leaseSeconds.
func globalHeld(token, roundToken int64, delay, leaseSeconds int32) func(*lockv1.DistributedLockStatus) {
	return func(s *lockv1.DistributedLockStatus) {
		s.Phase, s.Holder, s.HolderUID, s.GlobalHolderUID, s.GlobalCluster = lockv1.PhaseHeld, "pod-a", "", globalMe, "east"
		s.FencingToken, s.TermLeaseSeconds = token, leaseSeconds
		round(roundToken, delay)(s)
	}
}

// round writes the next round, vouching for token with lock delay delay.
func round(token int64, delay int32) func(*lockv1.DistributedLockStatus) {
	return func(s *lockv1.DistributedLockStatus) {
		s.GlobalRound++
		s.GlobalToken, s.GlobalLockDelaySeconds = token, delay
	}
}

// lead runs h's elector through a grant of globalToken: round 1 (an earlier term) read first,
// then rounds 2 (the grant) and 3. It checks that the pod does not lead on round 2 alone and
// leads after round 3, and returns the elector and when round 3 was written.
func lead(t *testing.T, h *harness, rounds *roundReads, leaseSeconds int32) (*leadership.Elector, time.Time) {
	t.Helper()
	setStatus(t, h.key, pending)
	el := h.run(t, globalConfig(h, rounds))
	rounds.waitRound(t, 1, time.Time{}, 10*time.Second)
	w2 := time.Now()
	setStatus(t, h.key, globalHeld(globalToken, globalToken, 2*leaseSeconds, leaseSeconds))
	rounds.waitRound(t, 2, w2, 5*time.Second) // the watch event asked for it at once
	never(t, 300*time.Millisecond, el.Valid, func() string {
		return "the pod leads on round 2 alone: one round vouching for its token proves no confirmation after any read"
	})
	w3 := time.Now()
	setStatus(t, h.key, round(globalToken, 2*leaseSeconds))
	eventually(t, 5*time.Second, el.Valid, func() string { return "the pod does not lead after rounds 2 and 3 vouched for its token" })
	if tok := el.Token(); tok != globalToken {
		t.Fatalf("Token() = %d, want %d", tok, globalToken)
	}
	return el, w3
}

// TestGlobalLeadsOnRoundsAndStopsAtSPlusDMinusM: L = 6 s, D = 12 s, m = 2 s. The pod leads once
// rounds 2 and 3 vouch for its token; when rounds stop landing (the holder cluster's manager is
// gone, its API server still answers and still shows Held) it stops at S + D - m = S + 10 s, S
// the send time of its newest read showing a round at or below r - 2: not at the in-cluster
// bound (every read still confirms Held, so that bound keeps moving) and not later.
func TestGlobalLeadsOnRoundsAndStopsAtSPlusDMinusM(t *testing.T) {
	h, rounds := newGlobalHarness(t, 6)
	el, _ := lead(t, h, rounds, 6)
	// One more round, 2 s later: the bound moves to the newest read of round 2.
	time.Sleep(2 * time.Second)
	w4 := time.Now()
	setStatus(t, h.key, round(globalToken, 12))
	rounds.waitRound(t, 4, w4, 5*time.Second)
	s := rounds.newestAtOrBelow(t, 2)
	want := s.Add(10 * time.Second)
	// While it leads, ValidUntil never passes S + 10 s, and by S + 8 s it is that bound (the
	// in-cluster bound, the newest read + 4.5 s, is later by then).
	for time.Now().Before(want.Add(-2 * time.Second)) {
		if vu := el.ValidUntil(); vu.After(want.Add(5 * time.Millisecond)) {
			t.Fatalf("ValidUntil = S + %v, want at most S + 10s", vu.Sub(s))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if vu := el.ValidUntil(); vu.Before(want.Add(-100*time.Millisecond)) || vu.After(want.Add(5*time.Millisecond)) {
		t.Errorf("at S + 8s: ValidUntil = S + %v, want S + 10s", vu.Sub(s))
	}
	eventually(t, 5*time.Second, func() bool { return !el.Valid() }, func() string {
		return fmt.Sprintf("still leading at S + %v with no round since round 4", time.Since(s).Round(time.Millisecond))
	})
	stopped := time.Now()
	if d := stopped.Sub(want); d < -100*time.Millisecond || d > 300*time.Millisecond {
		t.Errorf("stopped leading at S + %v, want S + 10s (D - m)", stopped.Sub(s).Round(time.Millisecond))
	}
	h.rec.waitEvents(t, "holder(pod-a,200) start(200) stop")
	if n := len(rounds.snapshot()); n < 6 {
		t.Errorf("only %d reads: the in-cluster bound was not renewed by reads showing Held", n)
	}
}

// TestGlobalOtherClusterNeverLeads: a term held by another cluster (globalCluster west, no
// globalHolderUID) is never led, however many rounds vouch for its token; OnNewHolder reports
// it with no holder pod and its token, and GetLeader is "". A ResourceLock refuses it and shows
// client-go a lease held by "lockwarden:cluster/west". Then the grant comes to this pod and it
// leads, so the refusal was the other cluster's term.
func TestGlobalOtherClusterNeverLeads(t *testing.T) {
	h, rounds := newGlobalHarness(t, 6)
	other := func(s *lockv1.DistributedLockStatus) {
		s.Phase, s.Holder, s.HolderUID, s.GlobalHolderUID, s.GlobalCluster = lockv1.PhaseHeld, "", "", "", "west"
		s.FencingToken, s.TermLeaseSeconds = 300, 6
		s.GlobalRound, s.GlobalToken, s.GlobalLockDelaySeconds = 1, 300, 12
	}
	setStatus(t, h.key, other)
	el := h.run(t, globalConfig(h, rounds))
	for r := int64(1); r <= 3; r++ {
		w := time.Now()
		if r > 1 {
			setStatus(t, h.key, round(300, 12))
		}
		rounds.waitRound(t, r, w, 5*time.Second)
		if el.Valid() {
			t.Fatalf("leading on another cluster's term at round %d", r)
		}
	}
	if got, uid := el.GetLeader(), el.GetLeaderUID(); got != "" || uid != "" {
		t.Errorf("GetLeader, GetLeaderUID = %q, %q; want no pod", got, uid)
	}
	h.rec.waitEvents(t, "holder(,300)")

	rlCfg := leadership.ResourceLockConfig{Config: h.proxy.Config(), Namespace: h.key.Namespace, Lock: h.key.Name,
		Identity: globalMe, Name: "pod-a", LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond, ExactTimings: true}
	rl, err := leadership.NewResourceLock(rlCfg)
	if err != nil {
		t.Fatalf("NewResourceLock: %v", err)
	}
	rec, _, err := rl.Get(t.Context())
	if err != nil || rec.HolderIdentity != "lockwarden:cluster/west" {
		t.Errorf("ResourceLock.Get = %+v, %v; want holder lockwarden:cluster/west", rec, err)
	}
	if err := rl.Update(t.Context(), resourcelock.LeaderElectionRecord{HolderIdentity: string(globalMe), LeaseDurationSeconds: 4}); !errors.Is(err, leadership.ErrNotGranted) {
		t.Errorf("ResourceLock.Update on another cluster's term = %v, want ErrNotGranted", err)
	}

	// The grant comes here: rounds 4 and 5 vouch for token 400, and the pod leads.
	setStatus(t, h.key, globalHeld(400, 400, 12, 6))
	setStatus(t, h.key, round(400, 12))
	eventually(t, 5*time.Second, func() bool { return el.Token() == 400 }, func() string { return "the pod does not lead its own grant" })
	h.rec.waitEvents(t, "holder(,300) holder(pod-a,400) start(400)")
}

// TestGlobalRoundRegressionRefuses: a consistent read that shows a lower round than an earlier
// read of the same object (a restored store; simulated by rewriting the answers, since the API
// server refuses a lower round) ends the term at once, fails readiness with ErrGlobalRefused,
// and the object's terms stay refused when its rounds climb again.
func TestGlobalRoundRegressionRefuses(t *testing.T) {
	h, rounds := newGlobalHarness(t, 6)
	el, _ := lead(t, h, rounds, 6)
	rounds.lower.Store(2) // round 3 was read: 2 is a regression
	w := time.Now()
	setStatus(t, h.key, round(globalToken, 12)) // round 4: its event asks for a read at once
	eventually(t, 2*time.Second, func() bool { return !el.Valid() }, func() string { return "still leading after a read showed the round go down" })
	if d := time.Since(w); d > time.Second {
		t.Errorf("stopped %v after the round step, want within one prompt read", d)
	}
	if err := el.ReadyzCheck(nil); !errors.Is(err, leadership.ErrGlobalRefused) {
		t.Errorf("ReadyzCheck = %v, want ErrGlobalRefused", err)
	}
	rounds.lower.Store(0)
	for r := int64(5); r <= 6; r++ {
		w := time.Now()
		setStatus(t, h.key, round(globalToken, 12))
		rounds.waitRound(t, r, w, 5*time.Second)
	}
	never(t, 300*time.Millisecond, el.Valid, func() string { return "led again on an object whose rounds went down" })
	if err := el.ReadyzCheck(nil); !errors.Is(err, leadership.ErrGlobalRefused) {
		t.Errorf("ReadyzCheck after the rounds climbed again = %v, want ErrGlobalRefused", err)
	}
	h.rec.waitEvents(t, "holder(pod-a,200) start(200) stop")
}

// TestGlobalTokenMismatchRefuses: a term Held by this pod under token 200 whose rounds vouch
// for another token (globalToken 100 != fencingToken 200) is never led; the first round that
// vouches for 200 is enough once an earlier read shows a round two below it.
func TestGlobalTokenMismatchRefuses(t *testing.T) {
	h, rounds := newGlobalHarness(t, 6)
	setStatus(t, h.key, pending)
	el := h.run(t, globalConfig(h, rounds))
	rounds.waitRound(t, 1, time.Time{}, 10*time.Second)
	for r := int64(2); r <= 3; r++ {
		w := time.Now()
		if r == 2 {
			setStatus(t, h.key, globalHeld(globalToken, globalOld, 12, 6))
		} else {
			setStatus(t, h.key, round(globalOld, 12))
		}
		rounds.waitRound(t, r, w, 5*time.Second)
		never(t, 200*time.Millisecond, el.Valid, func() string {
			return fmt.Sprintf("leading at round %d, which vouches for token %d, not the term's %d", r, globalOld, globalToken)
		})
	}
	if err := el.ReadyzCheck(nil); err != nil {
		t.Errorf("ReadyzCheck while rounds vouch for another token = %v, want nil (waiting, not refused)", err)
	}
	setStatus(t, h.key, round(globalToken, 12)) // round 4 vouches for 200; round 2 was read
	eventually(t, 5*time.Second, func() bool { return el.Token() == globalToken }, func() string { return "not leading once round 4 vouched for the term" })
}

// TestGlobalPromptReadOnRoundStep (finding L3): with L = 30 s the periodic reads are 10 s
// apart, yet a pod granted at round r0 leads within a read of round r0+1 landing, and while it
// leads a round step is read at once, not at the next periodic read.
func TestGlobalPromptReadOnRoundStep(t *testing.T) {
	h, rounds := newGlobalHarness(t, 30)
	setStatus(t, h.key, pending)
	el := h.run(t, globalConfig(h, rounds))
	rounds.waitRound(t, 1, time.Time{}, 10*time.Second)
	w2 := time.Now()
	setStatus(t, h.key, globalHeld(globalToken, globalToken, 60, 30))
	rounds.waitRound(t, 2, w2, 5*time.Second)
	if el.Valid() {
		t.Fatalf("leading on round 2 alone")
	}
	setStatus(t, h.key, round(globalToken, 60))
	acked := time.Now()
	eventually(t, 12*time.Second, el.Valid, func() string { return "not leading after round 3" })
	if d := time.Since(acked); d > time.Second {
		t.Errorf("led %v after round 3 was acknowledged, want within one prompt read (the periodic read is 10 s away)", d.Round(time.Millisecond))
	}
	w4 := time.Now()
	setStatus(t, h.key, round(globalToken, 60))
	rd := rounds.waitRound(t, 4, w4, 12*time.Second)
	if d := rd.done.Sub(w4); d > time.Second {
		t.Errorf("round 4 read %v after it was written while leading, want within one prompt read", d.Round(time.Millisecond))
	}
}

// TestGlobalResourceLockBound: a manager leading a Global lock through a ResourceLock sees
// itself leader only within the global bound. With L = 6 s, D = 12 s and no rounds after the
// grant's two, its renewals succeed while S + 10 s leaves RenewDeadline + RetryPeriod (2.5 s),
// then fail, and its validity never passes S + 10 s, though every read still shows Held.
func TestGlobalResourceLockBound(t *testing.T) {
	h, rounds := newGlobalHarness(t, 6)
	setStatus(t, h.key, pending)
	rl, err := leadership.NewResourceLock(leadership.ResourceLockConfig{Config: rounds.wrap(h.proxy.Config()), Namespace: h.key.Namespace, Lock: h.key.Name,
		Identity: globalMe, Name: "pod-a", LeaseDuration: 4 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond, ExactTimings: true})
	if err != nil {
		t.Fatalf("NewResourceLock: %v", err)
	}
	ctx := t.Context()
	ler := resourcelock.LeaderElectionRecord{HolderIdentity: string(globalMe), LeaseDurationSeconds: 4}
	if _, _, err := rl.Get(ctx); err != nil {
		t.Fatalf("Get: %v", err)
	}
	setStatus(t, h.key, globalHeld(globalToken, globalToken, 12, 6))
	if err := rl.Update(ctx, ler); !errors.Is(err, leadership.ErrNotGranted) {
		t.Fatalf("Update on round 2 alone = %v, want ErrNotGranted", err)
	}
	setStatus(t, h.key, round(globalToken, 12))
	s := rounds.newestAtOrBelow(t, 1)
	want := s.Add(10 * time.Second)
	var lastOK time.Time
	for time.Now().Before(want.Add(time.Second)) {
		err := rl.Update(ctx, ler)
		if err == nil {
			lastOK = time.Now()
			if tok := rl.Token(); tok != globalToken {
				t.Fatalf("Token() = %d after a renewal, want %d", tok, globalToken)
			}
		} else if !strings.Contains(err.Error(), "global validity left") && !lastOK.IsZero() {
			t.Fatalf("Update = %v, want a renewal refused as late", err)
		}
		if vu := rl.ValidUntil(); vu.After(want.Add(5 * time.Millisecond)) {
			t.Fatalf("ValidUntil = S + %v, want at most S + 10s", vu.Sub(s))
		}
		time.Sleep(250 * time.Millisecond)
	}
	if lastOK.IsZero() {
		t.Fatalf("no renewal succeeded")
	}
	// The last renewal left at least 2.5 s; the one 250 ms later would not have.
	if d := want.Sub(lastOK); d < 2400*time.Millisecond || d > 3300*time.Millisecond {
		t.Errorf("last renewal %v before S + 10s, want between 2.5 s and about 3 s", d.Round(time.Millisecond))
	}
	if rl.Valid() {
		t.Errorf("Valid() after S + 11s = true, want false")
	}
}

// WrappedRoundTripper lets client-go find the transports under this one (to close idle
// connections).
func (rt roundTransport) WrappedRoundTripper() http.RoundTripper { return rt.next }
