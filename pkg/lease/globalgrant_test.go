package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// waitNow observes name and writes rec's waiting record on that basis; it returns w.
func (e *genv) waitNow(t *testing.T, name string, rec lease.GlobalRecord) int64 {
	t.Helper()
	w, err := e.g.Wait(ctx(t), name, e.observe(t, name), rec, e.guard)
	if err != nil {
		t.Fatalf("Wait(%q) = %v, want nil", name, err)
	}
	return w
}

// putK writes K of name directly, as if a grant had landed without touching T.
func (e *genv) putK(t *testing.T, name string) {
	t.Helper()
	if _, err := e.cli.Put(ctx(t), e.g.GrantPath(name), `{"kind":"grant","cluster":{"name":"x","uid":"x"},"object":"o","holder":"h","holderUID":"u","delaySeconds":30}`); err != nil {
		t.Fatalf("put K: %v", err)
	}
}

// checkChanged checks that err is a failed compare (with ErrGuardFailed iff guardFailed)
// naming msg.
func checkChanged(t *testing.T, call string, err error, guardFailed bool, msg string) {
	t.Helper()
	if !errors.Is(err, lease.ErrGlobalChanged) || errors.Is(err, lease.ErrGuardFailed) != guardFailed ||
		errors.Is(err, lease.ErrUnknownOutcome) || !strings.Contains(err.Error(), msg) {
		t.Fatalf("%s = %v, want ErrGlobalChanged (ErrGuardFailed %v) mentioning %q", call, err, guardFailed, msg)
	}
}

func TestGlobalWait(t *testing.T) {
	e := newGlobalEnv(t)
	cases := []struct {
		name  string
		setup func(t *testing.T, name string) // before the basis
		after func(t *testing.T, name string) // between the basis and the Wait
		fail  bool                            // the guard does not hold
		want  string                          // "" for success, else in the error
		guard bool                            // want ErrGuardFailed
	}{
		{name: "T absent"},
		{name: "T at the basis revision", setup: func(t *testing.T, name string) {
			e.waitNow(t, name, waiting("west", 30))
		}},
		{name: "T holds an ended grant", setup: func(t *testing.T, name string) {
			token, id := e.first(t, name, record("west", "q", 30), 5*time.Second)
			if ok, err := e.g.Delete(ctx(t), name, token, id, e.guard); !ok || err != nil {
				t.Fatalf("Delete = %v, %v", ok, err)
			}
		}},
		{name: "K present", after: func(t *testing.T, name string) { e.putK(t, name) }, want: "granted with token"},
		{name: "T changed after the basis", after: func(t *testing.T, name string) {
			e.waitNow(t, name, waiting("west", 30))
		}, want: "tombstone at revision"},
		{name: "granted after the basis", after: func(t *testing.T, name string) {
			e.first(t, name, record("west", "q", 30), 5*time.Second)
		}, want: "granted with token"},
		{name: "guard false", fail: true, want: "guard", guard: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "w" + string(rune('a'+i))
			if tc.setup != nil {
				tc.setup(t, name)
			}
			basis := e.observe(t, name)
			if tc.name == "T at the basis revision" && basis.TMod != basis.Rev {
				t.Fatalf("basis T at %d, Rev %d: want equal, or the case tests nothing", basis.TMod, basis.Rev)
			}
			if tc.after != nil {
				tc.after(t, name)
			}
			guard := e.guard
			if tc.fail {
				guard = e.noGuard
			}
			rec := waiting("east", 40)
			rec.Kind = lease.RecordGrant // Wait sets the kind
			beforeState, beforeRev := e.state(t, name), e.rev(t)
			w, err := e.g.Wait(ctx(t), name, basis, rec, guard)
			if tc.want != "" {
				checkChanged(t, "Wait", err, tc.guard, tc.want)
				if got, rev := e.state(t, name), e.rev(t); got != beforeState || rev != beforeRev || w != 0 {
					t.Fatalf("failed Wait = %d, wrote (state %q rev %d), want 0, nothing (%q, %d)", w, got, rev, beforeState, beforeRev)
				}
				return
			}
			if err != nil || w <= basis.Rev {
				t.Fatalf("Wait = %d, %v, want a revision above the basis %d", w, err, basis.Rev)
			}
			v := e.observe(t, name)
			rec.Kind = lease.RecordWaiting
			if v.Held || v.TMod != w || v.Tomb != rec {
				t.Fatalf("after Wait: held %v, T at %d with %+v, want absent, %d, %+v", v.Held, v.TMod, v.Tomb, w, rec)
			}
			if kv := e.kv(t, e.g.TombstonePath(name)); kv.Lease != 0 {
				t.Fatalf("T has lease %x, want none", kv.Lease)
			}
		})
	}
}

func TestGlobalGrant(t *testing.T) {
	e := newGlobalEnv(t)
	const ttl = 5 * time.Second
	// ended grants name and deletes it: T holds the ended grant, whose token it returns.
	ended := func(t *testing.T, name string) int64 {
		token, id := e.first(t, name, record("east", "p", 30), ttl)
		if ok, err := e.g.Delete(ctx(t), name, token, id, e.guard); !ok || err != nil {
			t.Fatalf("Delete = %v, %v", ok, err)
		}
		return token
	}
	first := func(*testing.T, string) lease.GlobalGrantRequest {
		return lease.GlobalGrantRequest{Basis: lease.GrantFirst}
	}
	takeover := func(t *testing.T, name string) lease.GlobalGrantRequest {
		return lease.GlobalGrantRequest{Basis: lease.GrantTakeover, Rev: e.waitNow(t, name, waiting("east", 30))}
	}
	succession := func(t *testing.T, name string) lease.GlobalGrantRequest {
		return lease.GlobalGrantRequest{Basis: lease.GrantSuccession, Rev: ended(t, name)}
	}
	cases := []struct {
		name  string
		req   func(t *testing.T, name string) lease.GlobalGrantRequest
		after func(t *testing.T, name string) // between the basis and the grant
		fail  bool                            // the guard does not hold
		want  string                          // "" for success
		guard bool
	}{
		{name: "first", req: first},
		{name: "first, T written", req: func(t *testing.T, name string) lease.GlobalGrantRequest {
			ended(t, name)
			return first(t, name)
		}, want: "tombstone at revision"},
		{name: "first, K present", req: first, after: func(t *testing.T, name string) { e.putK(t, name) }, want: "granted with token"},
		{name: "first, guard false", req: first, fail: true, want: "guard", guard: true},
		{name: "takeover", req: takeover},
		{name: "takeover after a grant ended", req: func(t *testing.T, name string) lease.GlobalGrantRequest {
			ended(t, name)
			return takeover(t, name)
		}},
		{name: "takeover, T changed since the wait", req: takeover, after: func(t *testing.T, name string) {
			e.waitNow(t, name, waiting("west", 30))
		}, want: "tombstone at revision"},
		{name: "takeover, another revision", req: func(t *testing.T, name string) lease.GlobalGrantRequest {
			r := takeover(t, name)
			r.Rev--
			return r
		}, want: "tombstone at revision"},
		{name: "takeover, K present", req: takeover, after: func(t *testing.T, name string) { e.putK(t, name) }, want: "granted with token"},
		{name: "takeover, guard false", req: takeover, fail: true, want: "guard", guard: true},
		{name: "succession", req: succession},
		{name: "succession, T changed since the own token", req: succession, after: func(t *testing.T, name string) {
			e.waitNow(t, name, waiting("west", 30))
		}, want: "tombstone at revision"},
		{name: "succession, own grant not deleted", req: func(t *testing.T, name string) lease.GlobalGrantRequest {
			token, _ := e.first(t, name, record("east", "p", 30), ttl)
			return lease.GlobalGrantRequest{Basis: lease.GrantSuccession, Rev: token}
		}, want: "granted with token"},
		{name: "succession, guard false", req: succession, fail: true, want: "guard", guard: true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := "g" + string(rune('a'+i))
			req := tc.req(t, name)
			if tc.after != nil {
				tc.after(t, name)
			}
			guard := e.guard
			if tc.fail {
				guard = e.noGuard
			}
			req.TTL, req.Record = ttl, record("east", "p2", 45)
			req.Record.Kind = lease.RecordWaiting // Grant sets the kind
			beforeLeases, beforeState, beforeRev := leases(t, e.cli), e.state(t, name), e.rev(t)
			token, id, err := e.g.Grant(ctx(t), name, req, guard)
			if tc.want != "" {
				checkChanged(t, "Grant", err, tc.guard, tc.want)
				if token != 0 || id != 0 {
					t.Fatalf("failed Grant = %d, %x, want 0, 0", token, id)
				}
				if got, rev := e.state(t, name), e.rev(t); got != beforeState || rev != beforeRev {
					t.Fatalf("failed Grant wrote (state %q rev %d), want nothing (%q, %d)", got, rev, beforeState, beforeRev)
				}
				e.noNewLease(t, beforeLeases)
				return
			}
			if err != nil || token <= beforeRev {
				t.Fatalf("Grant(%s) = %d, %x, %v, want a token above %d", req.Basis, token, id, err, beforeRev)
			}
			k, tomb := e.kv(t, e.g.GrantPath(name)), e.kv(t, e.g.TombstonePath(name))
			if k.CreateRevision != token || tomb.ModRevision != token {
				t.Fatalf("token %d, K CreateRevision %d, T ModRevision %d: want all equal", token, k.CreateRevision, tomb.ModRevision)
			}
			if k.Lease != int64(id) || tomb.Lease != 0 {
				t.Fatalf("K on lease %x, T on lease %x, want %x and none", k.Lease, tomb.Lease, id)
			}
			if got := e.ttlOf(t, id); got <= 0 || got > int64(ttl/time.Second) {
				t.Fatalf("grant lease TTL %d, want in (0, %d]", got, ttl/time.Second)
			}
			v := e.observe(t, name)
			req.Record.Kind = lease.RecordGrant
			if v.Grant != req.Record || v.Tomb != req.Record {
				t.Fatalf("records K %+v T %+v, want %+v", v.Grant, v.Tomb, req.Record)
			}
		})
	}
}
