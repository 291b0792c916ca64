package lease_test

// Adversarial review of the shared-etcd engine of global locks (rev-eng). Each test states
// the suspicion it checks. A test that fails shows a defect; one that passes pins the
// property.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Suspicion: a GlobalView does not say which global name it read, so Wait cannot tell a basis
// of another name from one of its own. A basis of name b (K_b absent) passed to Wait for name
// a, whose grant stood at the basis's revision and was deleted after it, writes a waiting
// record for a; a takeover grant under it then lands. Lemma 4 needs every earlier token's K
// deleted at or before the basis revision v and every confirmation of it linearized before
// the reception R: here a's grant was confirmed after R, so a wait counted from R can end
// while a's holder is still valid. Wait should refuse a basis that did not read its name.
func TestReviewGlobalWaitBasisOfAnotherName(t *testing.T) {
	e := newGlobalEnv(t)
	token, id := e.first(t, "a", record("east", "p", 30), 5*time.Second)
	basisB := e.observe(t, "b") // shows K absent, but of b: a's K stands at basisB.Rev
	if held, err := e.g.Confirm(ctx(t), "a", token, e.guard); err != nil || !held {
		t.Fatalf("Confirm(a) after the basis = %v, %v, want held: a confirmation after R", held, err)
	}
	if ok, err := e.g.Delete(ctx(t), "a", token, id, e.guard); err != nil || !ok {
		t.Fatalf("Delete(a) = %v, %v", ok, err)
	}
	deletedAt := e.rev(t)
	w, err := e.g.Wait(ctx(t), "a", basisB, waiting("west", 30), e.guard)
	if err == nil {
		g, _, gerr := e.g.Grant(ctx(t), "a", lease.GlobalGrantRequest{Basis: lease.GrantTakeover, Rev: w, Record: record("west", "q", 30), TTL: 5 * time.Second}, e.guard)
		t.Fatalf("Wait(a) on a basis read of b (rev %d) = %d, nil; a's grant %d was confirmed after that basis "+
			"and deleted at %d > %d; takeover Grant under it = %d, %v: want Wait to refuse a basis of another name",
			basisB.Rev, w, token, deletedAt, basisB.Rev, g, gerr)
	}
	if !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("Wait(a) on a basis of b = %v, want ErrInvalid", err)
	}
}

// Suspicion: a stored record that parses but is incomplete (no delay, a delay below 1, no
// cluster UID, a waiting record in K) is returned by Observe as if it were sound. The carried
// delay then reads 0, and Wait accepts a waiting record below the delay T really demanded
// (C3 through a record written by another version or by hand). Observe's contract says an
// unreadable record is an error naming its key, "never a zero record".
func TestReviewGlobalIncompleteRecord(t *testing.T) {
	e := newGlobalEnv(t)
	rows := []struct {
		name, key, value string
	}{
		{"T grant without delay", "tombstones", `{"kind":"grant","cluster":{"name":"east","uid":"u"},"object":"o","holder":"p","holderUID":"h"}`},
		{"T grant with delay renamed", "tombstones", `{"kind":"grant","cluster":{"name":"east","uid":"u"},"object":"o","holder":"p","holderUID":"h","delay":60}`},
		{"T waiting with negative delay", "tombstones", `{"kind":"waiting","cluster":{"name":"east","uid":"u"},"object":"o","delaySeconds":-60}`},
		{"T grant of no cluster", "tombstones", `{"kind":"grant","object":"o","holder":"p","holderUID":"h","delaySeconds":60}`},
		{"T only a kind", "tombstones", `{"kind":"grant"}`},
		{"K waiting record", "grants", `{"kind":"waiting","cluster":{"name":"east","uid":"u"},"object":"o","delaySeconds":60}`},
	}
	var bad []string
	for i, row := range rows {
		name := "r" + string(rune('a'+i))
		key := e.g.Prefix() + "/" + row.key + "/" + name
		if _, err := e.cli.Put(ctx(t), key, row.value); err != nil {
			t.Fatalf("Put(%q) = %v", key, err)
		}
		v, err := e.g.Observe(ctx(t), name)
		if err != nil && strings.Contains(err.Error(), key) {
			continue
		}
		msg := row.name + ": Observe = err " + errString(err)
		if err == nil && row.key == "tombstones" {
			// The consequence: a waiting record of 1 s passes Wait's check against T's delay.
			w, werr := e.g.Wait(ctx(t), name, v, waiting("west", 1), e.guard)
			msg += fmt.Sprintf(", Tomb %+v, then Wait with a 1 s delay = %d, %s", v.Tomb, w, errString(werr))
		}
		bad = append(bad, msg)
	}
	if len(bad) > 0 {
		t.Fatalf("incomplete records read as sound, want an error naming the key:\n  %s", strings.Join(bad, "\n  "))
	}
}

// Suspicion: a grant whose new lease is revoked (or expires) between LeaseGrant and the
// transaction still writes T, or is reported as ErrGlobalChanged or as an unknown outcome.
// etcd refuses the whole transaction when a Put's lease is gone: nothing is written, and the
// error is a definite one.
func TestReviewGlobalGrantLeaseGoneBeforeTxn(t *testing.T) {
	e := newGlobalEnv(t)
	gate := etcdtest.NewGate()
	g := e.gated(t, gate, e.g.Prefix())
	before := leases(t, e.cli)
	gate.Stall("Txn")
	type result struct {
		token int64
		id    clientv3.LeaseID
		err   error
	}
	res := make(chan result, 1)
	go func() {
		token, id, err := g.Grant(ctx(t), "n", lease.GlobalGrantRequest{Basis: lease.GrantFirst, Record: record("east", "p", 30), TTL: 5 * time.Second}, e.guard)
		res <- result{token, id, err}
	}()
	var fresh clientv3.LeaseID
	eventually(t, 5*time.Second, func() error {
		for id := range leases(t, e.cli) {
			if !before[id] {
				fresh = id
				return nil
			}
		}
		return errors.New("grant lease not granted yet")
	})
	if _, err := e.cli.Revoke(ctx(t), fresh); err != nil {
		t.Fatalf("Revoke = %v", err)
	}
	stateBefore, revBefore := e.state(t, "n"), e.rev(t)
	gate.Unstall("Txn")
	r := <-res
	if r.err == nil || r.token != 0 || errors.Is(r.err, lease.ErrGlobalChanged) || errors.Is(r.err, lease.ErrUnknownOutcome) {
		t.Fatalf("Grant on a lease revoked before its txn = %d, %x, %v, want 0 and a definite error (not ErrGlobalChanged, not ErrUnknownOutcome)", r.token, r.id, r.err)
	}
	t.Logf("Grant on a lease revoked before its txn: %v", r.err)
	if got, rev := e.state(t, "n"), e.rev(t); got != stateBefore || rev != revBefore {
		t.Fatalf("Grant on a revoked lease wrote (state %q, rev %d -> %d), want nothing", got, revBefore, rev)
	}
	if v := e.observe(t, "n"); v.Held || v.TCreate != 0 {
		t.Fatalf("after the refused grant: %+v, want K and T absent (a first grant is still possible)", v)
	}
}

// Suspicion: concurrent grants or waits on one basis from several managers both land (two
// grants coexist, or two waits stand on one observation). Exactly one of each may win.
func TestReviewGlobalConcurrentGrantsAndWaits(t *testing.T) {
	e := newGlobalEnv(t)
	const n = 8
	before := leases(t, e.cli)
	race := func(call func(i int) error) (wins int, errs []error) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				err := call(i)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					wins++
				} else {
					errs = append(errs, err)
				}
			}()
		}
		close(start)
		wg.Wait()
		return wins, errs
	}
	wins, errs := race(func(i int) error {
		_, _, err := e.g.Grant(ctx(t), "first", lease.GlobalGrantRequest{Basis: lease.GrantFirst, Record: record("c"+string(rune('a'+i)), "p", 30), TTL: 5 * time.Second}, e.guard)
		return err
	})
	if wins != 1 {
		t.Fatalf("%d concurrent first grants: %d landed, want exactly 1 (errors %v)", n, wins, errs)
	}
	for _, err := range errs {
		if !errors.Is(err, lease.ErrGlobalChanged) {
			t.Fatalf("losing first grant = %v, want ErrGlobalChanged", err)
		}
	}
	v := e.observe(t, "first")
	if ok, err := e.g.Delete(ctx(t), "first", v.Token, v.Lease, e.guard); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	e.noNewLease(t, before) // the losers' leases are revoked, the winner's with its delete

	basis := e.observe(t, "first")
	var mu sync.Mutex
	var ws []int64
	wins, errs = race(func(i int) error {
		w, err := e.g.Wait(ctx(t), "first", basis, waiting("c"+string(rune('a'+i)), 30), e.guard)
		if err == nil {
			mu.Lock()
			ws = append(ws, w)
			mu.Unlock()
		}
		return err
	})
	if wins != 1 {
		t.Fatalf("%d concurrent waits on one basis: %d landed, want exactly 1 (errors %v)", n, wins, errs)
	}
	// The same basis again (a retried Wait whose first answer was taken as lost) fails: the
	// wait on it was written already.
	if w, err := e.g.Wait(ctx(t), "first", basis, waiting("ca", 30), e.guard); err == nil {
		t.Fatalf("second Wait on the same basis = %d, nil, want ErrGlobalChanged", w)
	}
	// Everyone races a takeover under the one w: one lands, every other is ErrGlobalChanged.
	wins, errs = race(func(i int) error {
		_, _, err := e.g.Grant(ctx(t), "first", lease.GlobalGrantRequest{Basis: lease.GrantTakeover, Rev: ws[0], Record: record("c"+string(rune('a'+i)), "p", 30), TTL: 5 * time.Second}, e.guard)
		return err
	})
	if wins != 1 {
		t.Fatalf("%d concurrent takeovers under w=%d: %d landed, want exactly 1 (errors %v)", n, ws[0], wins, errs)
	}
	after := e.observe(t, "first")
	if after.Token <= ws[0] || after.TMod != after.Token || after.Token <= v.Token {
		t.Fatalf("takeover token %d, T at %d, earlier token %d, w %d: want T at the token, above both", after.Token, after.TMod, v.Token, ws[0])
	}
}

// Suspicion: a waiting record put twice by one manager leaves the first w usable, so that a
// grant under the older record skips the wait the newer one restarted; and a succession grant
// (R8) passes under a waiting record that stands at the own token's revision.
func TestReviewGlobalWaitTwice(t *testing.T) {
	e := newGlobalEnv(t)
	w1 := e.waitNow(t, "x", waiting("east", 30))
	w2 := e.waitNow(t, "x", waiting("east", 30)) // a new basis that shows w1 standing
	if w2 <= w1 {
		t.Fatalf("second Wait = %d, want above the first %d", w2, w1)
	}
	_, _, err := e.g.Grant(ctx(t), "x", lease.GlobalGrantRequest{Basis: lease.GrantTakeover, Rev: w1, Record: record("east", "p", 30), TTL: 5 * time.Second}, e.guard)
	checkChanged(t, "Grant under the replaced waiting record", err, false, "tombstone at revision")
	// The own last token's revision no longer names T once a waiting record replaced it.
	token, id := e.first(t, "y", record("east", "p", 30), 5*time.Second)
	if ok, err := e.g.Delete(ctx(t), "y", token, id, e.guard); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	e.waitNow(t, "y", waiting("west", 30))
	_, _, err = e.g.Grant(ctx(t), "y", lease.GlobalGrantRequest{Basis: lease.GrantSuccession, Rev: token, Record: record("east", "p", 30), TTL: 5 * time.Second}, e.guard)
	checkChanged(t, "succession after another cluster's wait", err, false, "tombstone at revision")
}

// Suspicion: T put on a lease (by hand, or by an engine whose prefix overlaps: F4) stays on
// it after the next Wait or Grant, and expires. Every write of T must leave it without one.
func TestReviewGlobalTombstoneLeaseDetached(t *testing.T) {
	e := newGlobalEnv(t)
	l, err := e.cli.Grant(ctx(t), 60)
	if err != nil {
		t.Fatalf("Grant lease = %v", err)
	}
	defer func() { _, _ = e.cli.Revoke(context.Background(), l.ID) }()
	for _, name := range []string{"w", "g"} {
		rec := waiting("east", 30)
		rec.Kind = lease.RecordWaiting
		if _, err := e.cli.Put(ctx(t), e.g.TombstonePath(name), stringOf(rec), clientv3.WithLease(l.ID)); err != nil {
			t.Fatalf("Put T on a lease = %v", err)
		}
	}
	w := e.waitNow(t, "w", waiting("west", 30))
	if kv := e.kv(t, e.g.TombstonePath("w")); kv.Lease != 0 || kv.ModRevision != w {
		t.Fatalf("T after Wait on lease %x at %d, want none at %d", kv.Lease, kv.ModRevision, w)
	}
	wg := e.waitNow(t, "g", waiting("west", 30))
	token, _, err := e.g.Grant(ctx(t), "g", lease.GlobalGrantRequest{Basis: lease.GrantTakeover, Rev: wg, Record: record("west", "q", 30), TTL: 5 * time.Second}, e.guard)
	if err != nil {
		t.Fatalf("Grant = %v", err)
	}
	if kv := e.kv(t, e.g.TombstonePath("g")); kv.Lease != 0 || kv.ModRevision != token {
		t.Fatalf("T after Grant on lease %x at %d, want none at %d", kv.Lease, kv.ModRevision, token)
	}
	// Revoking the hand-made lease deletes nothing of the global lock.
	if _, err := e.cli.Revoke(ctx(t), l.ID); err != nil {
		t.Fatalf("Revoke = %v", err)
	}
	for _, name := range []string{"w", "g"} {
		if kv := e.kv(t, e.g.TombstonePath(name)); kv == nil {
			t.Fatalf("T of %s gone with the revoked lease, want it kept", name)
		}
	}
}

// Suspicion: Delete revokes a lease another grant uses. Delete with the token of a grant
// that was replaced, and the new grant's lease, must neither delete K nor revoke the lease.
func TestReviewGlobalDeleteOldTokenNewLease(t *testing.T) {
	e := newGlobalEnv(t)
	old, oldLease := e.first(t, "d", record("east", "p", 30), 5*time.Second)
	if ok, err := e.g.Delete(ctx(t), "d", old, oldLease, e.guard); !ok || err != nil {
		t.Fatalf("Delete = %v, %v", ok, err)
	}
	next, nextLease, err := e.g.Grant(ctx(t), "d", lease.GlobalGrantRequest{Basis: lease.GrantSuccession, Rev: old, Record: record("east", "p", 30), TTL: 5 * time.Second}, e.guard)
	if err != nil {
		t.Fatalf("Grant = %v", err)
	}
	if ok, err := e.g.Delete(ctx(t), "d", old, nextLease, e.guard); ok || err != nil {
		t.Fatalf("Delete(old token %d, new lease) = %v, %v, want false, nil", old, ok, err)
	}
	if v := e.observe(t, "d"); !v.Held || v.Token != next || e.ttlOf(t, nextLease) <= 0 {
		t.Fatalf("after a Delete of the old token: %+v, lease TTL %d, want %d held on a live lease", v, e.ttlOf(t, nextLease), next)
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// stringOf is rec as stored.
func stringOf(rec lease.GlobalRecord) string {
	b, err := json.Marshal(rec)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Suspicion: two clusters registering one name (or one UID under two names) at the same
// moment both succeed, each having read the keys absent (F3). The create-only compares let
// exactly one through; the other is refused, naming the winner.
func TestReviewGlobalRegisterRace(t *testing.T) {
	e := newGlobalEnv(t)
	rows := []struct {
		name string
		ids  [2]lease.ClusterID
		pref [2]string
	}{
		{"one name, two UIDs", [2]lease.ClusterID{{Name: "east", UID: "uid-1"}, {Name: "east", UID: "uid-2"}}, [2]string{"/lw-1", "/lw-2"}},
		{"one UID, two names", [2]lease.ClusterID{{Name: "north", UID: "uid-3"}, {Name: "south", UID: "uid-3"}}, [2]string{"/lw-3", "/lw-4"}},
		{"one engine prefix", [2]lease.ClusterID{{Name: "up", UID: "uid-5"}, {Name: "down", UID: "uid-6"}}, [2]string{"/lw-5", "/lw-5"}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			var errs [2]error
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					errs[i] = e.g.Register(ctx(t), row.ids[i], row.pref[i])
				}()
			}
			close(start)
			wg.Wait()
			if (errs[0] == nil) == (errs[1] == nil) {
				t.Fatalf("concurrent Register = %v, %v, want exactly one refused", errs[0], errs[1])
			}
			for _, err := range errs {
				if err != nil && !errors.Is(err, lease.ErrClusterNameTaken) {
					t.Fatalf("refused Register = %v, want ErrClusterNameTaken", err)
				}
			}
		})
	}
}

// Suspicion: Watch misses changes without a resync when etcd compacts the history its watch
// still had to send. The client's answers are held (the proxy pauses them) while many changes
// land, so that etcd stops sending to this watcher (gRPC flow control, then its send buffer)
// and holds it back as a slow watcher; the history is then compacted. When the answers flow
// again, either every change is reported or a resync follows: never a silent gap.
func TestReviewGlobalWatchCompacted(t *testing.T) {
	e := newGlobalEnv(t)
	g, p, _ := e.proxied(t)
	var mu sync.Mutex
	floods, resyncs := 0, 0
	c, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		errc <- g.Watch(c, func(name string) {
			mu.Lock()
			defer mu.Unlock()
			if name == "flood" {
				floods++
			}
		}, func() { mu.Lock(); resyncs++; mu.Unlock() })
	}()
	eventually(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if resyncs == 0 {
			return errors.New("watch not created")
		}
		return nil
	})
	p.PauseRx()
	const n = 600
	value := strings.Repeat("x", 1024)
	for range n {
		if _, err := e.cli.Put(ctx(t), e.g.GrantPath("flood"), value); err != nil {
			p.UnpauseRx()
			t.Fatalf("Put = %v", err)
		}
	}
	rev := e.rev(t)
	if _, err := e.cli.Compact(ctx(t), rev); err != nil {
		p.UnpauseRx()
		t.Fatalf("Compact(%d) = %v", rev, err)
	}
	mu.Lock()
	resyncsBefore := resyncs
	mu.Unlock()
	p.UnpauseRx()
	eventually(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if floods == n || resyncs > resyncsBefore {
			return nil
		}
		return fmt.Errorf("%d of %d changes reported and no resync since the compaction at %d", floods, n, rev)
	})
	mu.Lock()
	t.Logf("after the compaction: %d of %d changes reported, %d resyncs (%d before)", floods, n, resyncs, resyncsBefore)
	mu.Unlock()
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch = %v, want context.Canceled", err)
	}
}
