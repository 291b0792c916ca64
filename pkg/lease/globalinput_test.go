package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// etcdMethods are the etcd calls the global engine could send.
var etcdMethods = []string{"Txn", "Range", "Put", "DeleteRange", "LeaseGrant", "LeaseRevoke", "LeaseKeepAlive", "LeaseTimeToLive", "Watch"}

// sent returns how many etcd calls went through gate.
func sent(gate *etcdtest.Gate) int {
	n := 0
	for _, m := range etcdMethods {
		n += gate.Count(m)
	}
	return n
}

// Bad input gets ErrInvalid saying what is wrong, and sends nothing to etcd.
func TestGlobalBadInput(t *testing.T) {
	e := newGlobalEnv(t)
	gate := etcdtest.NewGate()
	g, nested := e.gated(t, gate, "/lw-global"), e.gated(t, gate, "/shared/global")
	ok, no := e.guard, clientv3.Cmp{}
	basis := lease.GlobalView{Name: "n", Prefix: g.Prefix(), Rev: 10}
	rec := record("east", "p", 30)
	wrec := waiting("east", 30)
	req := func(mod func(*lease.GlobalGrantRequest)) lease.GlobalGrantRequest {
		r := lease.GlobalGrantRequest{Basis: lease.GrantFirst, Record: rec, TTL: 3 * time.Second}
		mod(&r)
		return r
	}
	grant := func(c context.Context, name string, r lease.GlobalGrantRequest) error {
		token, id, err := g.Grant(c, name, r, ok)
		if token != 0 || id != 0 {
			t.Errorf("Grant = %d, %x on bad input, want 0, 0", token, id)
		}
		return err
	}
	withRec := func(mod func(*lease.GlobalRecord)) lease.GlobalRecord {
		r := rec
		mod(&r)
		return r
	}
	cases := []struct {
		name string
		call func(c context.Context) error
		msg  string
	}{
		{"observe empty name", func(c context.Context) error { _, err := g.Observe(c, ""); return err }, "global name is empty"},
		{"observe name with /", func(c context.Context) error { _, err := g.Observe(c, "a/b"); return err }, "contains /"},
		{"observe name ..", func(c context.Context) error { _, err := g.Observe(c, ".."); return err }, "path step"},
		{"observe control character", func(c context.Context) error { _, err := g.Observe(c, "a\x00"); return err }, "control character"},
		{"observe not UTF-8", func(c context.Context) error { _, err := g.Observe(c, "a\xff"); return err }, "UTF-8"},
		{"wait empty name", func(c context.Context) error { _, err := g.Wait(c, "", basis, wrec, ok); return err }, "global name is empty"},
		{"wait no guard", func(c context.Context) error { _, err := g.Wait(c, "n", basis, wrec, no); return err }, "guard compare is empty"},
		{"wait basis not read", func(c context.Context) error { _, err := g.Wait(c, "n", lease.GlobalView{}, wrec, ok); return err }, "basis revision 0"},
		{"wait basis held", func(c context.Context) error {
			_, err := g.Wait(c, "n", lease.GlobalView{Name: "n", Prefix: g.Prefix(), Rev: 10, Held: true, Token: 9}, wrec, ok)
			return err
		}, "basis shows the grant held"},
		{"wait basis T after its revision", func(c context.Context) error {
			_, err := g.Wait(c, "n", lease.GlobalView{Name: "n", Prefix: g.Prefix(), Rev: 10, TCreate: 3, TMod: 11}, wrec, ok)
			return err
		}, "after its own revision"},
		{"wait delay below T's", func(c context.Context) error {
			_, err := g.Wait(c, "n", lease.GlobalView{Name: "n", Prefix: g.Prefix(), Rev: 10, TCreate: 3, TMod: 3, Tomb: lease.GlobalRecord{DelaySeconds: 60}}, wrec, ok)
			return err
		}, "below the 60 s"},
		{"wait no object", func(c context.Context) error {
			_, err := g.Wait(c, "n", basis, withRec(func(r *lease.GlobalRecord) { r.Object = "" }), ok)
			return err
		}, "no object UID"},
		{"wait cluster UID empty", func(c context.Context) error {
			_, err := g.Wait(c, "n", basis, withRec(func(r *lease.GlobalRecord) { r.Cluster.UID = "" }), ok)
			return err
		}, "UID"},
		{"wait delay zero", func(c context.Context) error {
			_, err := g.Wait(c, "n", basis, withRec(func(r *lease.GlobalRecord) { r.DelaySeconds = 0 }), ok)
			return err
		}, "positive delay"},
		{"grant empty name", func(c context.Context) error { return grant(c, "", req(func(*lease.GlobalGrantRequest) {})) }, "global name is empty"},
		{"grant name with /", func(c context.Context) error { return grant(c, "a/b", req(func(*lease.GlobalGrantRequest) {})) }, "contains /"},
		{"grant TTL 1.5s", func(c context.Context) error {
			return grant(c, "n", req(func(r *lease.GlobalGrantRequest) { r.TTL = 1500 * time.Millisecond }))
		}, "whole seconds"},
		{"grant TTL 2.5s", func(c context.Context) error {
			return grant(c, "n", req(func(r *lease.GlobalGrantRequest) { r.TTL = 2500 * time.Millisecond }))
		}, "whole seconds"},
		{"grant TTL 1s", func(c context.Context) error {
			return grant(c, "n", req(func(r *lease.GlobalGrantRequest) { r.TTL = time.Second }))
		}, "at least 2s"},
		{"grant first with a revision", func(c context.Context) error {
			return grant(c, "n", req(func(r *lease.GlobalGrantRequest) { r.Rev = 5 }))
		}, "want 0"},
		{"grant takeover revision 0", func(c context.Context) error {
			return grant(c, "n", req(func(r *lease.GlobalGrantRequest) { r.Basis = lease.GrantTakeover }))
		}, "takeover grant with revision 0"},
		{"grant succession revision 0", func(c context.Context) error {
			return grant(c, "n", req(func(r *lease.GlobalGrantRequest) { r.Basis = lease.GrantSuccession }))
		}, "succession grant with revision 0"},
		{"grant unknown basis", func(c context.Context) error {
			return grant(c, "n", req(func(r *lease.GlobalGrantRequest) { r.Basis = 7; r.Rev = 5 }))
		}, "unknown grant basis 7"},
		{"grant no holder", func(c context.Context) error {
			return grant(c, "n", req(func(r *lease.GlobalGrantRequest) { r.Record.Holder = "" }))
		}, "want both"},
		{"grant record lease not the TTL", func(c context.Context) error {
			return grant(c, "n", req(func(r *lease.GlobalGrantRequest) { r.Record.LeaseSeconds = 6 }))
		}, "carries lease 6 s"},
		{"grant record lease negative", func(c context.Context) error {
			return grant(c, "n", req(func(r *lease.GlobalGrantRequest) { r.Record.LeaseSeconds = -3 }))
		}, "carries lease -3 s"},
		{"grant no guard", func(c context.Context) error {
			_, _, err := g.Grant(c, "n", req(func(*lease.GlobalGrantRequest) {}), no)
			return err
		}, "guard compare is empty"},
		{"confirm token 0", func(c context.Context) error { _, err := g.Confirm(c, "n", 0, ok); return err }, "token 0 is not positive"},
		{"confirm empty name", func(c context.Context) error { _, err := g.Confirm(c, "", 5, ok); return err }, "global name is empty"},
		{"confirm no guard", func(c context.Context) error { _, err := g.Confirm(c, "n", 5, no); return err }, "guard compare is empty"},
		{"delete token 0", func(c context.Context) error { _, err := g.Delete(c, "n", 0, 1, ok); return err }, "token 0 is not positive"},
		{"delete name with /", func(c context.Context) error { _, err := g.Delete(c, "a/b", 5, 1, ok); return err }, "contains /"},
		{"delete negative lease", func(c context.Context) error { _, err := g.Delete(c, "n", 5, -1, ok); return err }, "negative"},
		{"delete no guard", func(c context.Context) error { _, err := g.Delete(c, "n", 5, 1, no); return err }, "guard compare is empty"},
		{"renew lease 0", func(c context.Context) error { _, err := g.Renew(c, 0); return err }, "not a granted lease"},
		{"watch nil callback", func(c context.Context) error { return g.Watch(c, nil, func() {}) }, "nil callback"},
		{"register empty name", func(c context.Context) error {
			return g.Register(c, lease.ClusterID{UID: "u"}, "/lw")
		}, "cluster name is empty"},
		{"register name with /", func(c context.Context) error {
			return g.Register(c, lease.ClusterID{Name: "a/b", UID: "u"}, "/lw")
		}, "contains /"},
		{"register empty UID", func(c context.Context) error {
			return g.Register(c, lease.ClusterID{Name: "east"}, "/lw")
		}, "UID"},
		{"register empty engine prefix", func(c context.Context) error {
			return g.Register(c, lease.ClusterID{Name: "east", UID: "u"}, "")
		}, "engine prefix"},
		{"register engine prefix = global prefix", func(c context.Context) error {
			return g.Register(c, lease.ClusterID{Name: "east", UID: "u"}, "/lw-global")
		}, "overlaps"},
		{"register engine prefix inside the global prefix", func(c context.Context) error {
			return g.Register(c, lease.ClusterID{Name: "east", UID: "u"}, "/lw-global/engine")
		}, "overlaps"},
		{"register global prefix inside the engine prefix", func(c context.Context) error {
			return nested.Register(c, lease.ClusterID{Name: "east", UID: "u"}, "/shared")
		}, "overlaps"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, cancel := context.WithTimeout(ctx(t), time.Second)
			defer cancel()
			n := sent(gate)
			err := tc.call(c)
			if !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want ErrInvalid mentioning %q", err, tc.msg)
			}
			if got := sent(gate) - n; got != 0 {
				t.Fatalf("bad input sent %d etcd calls, want none", got)
			}
		})
	}

	t.Run("NewGlobal", func(t *testing.T) {
		if _, err := lease.NewGlobal(e.cli, "/x/"); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("NewGlobal(/x/) = %v, want ErrInvalid", err)
		}
		if _, err := lease.NewGlobal(e.cli, "x"); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("NewGlobal(x) = %v, want ErrInvalid: without its leading / it names other keys than /x", err)
		}
		if _, err := lease.NewGlobal(nil, "/x"); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("NewGlobal(nil) = %v, want ErrInvalid", err)
		}
		g, err := lease.NewGlobal(e.cli, "")
		if err != nil || g.Prefix() != lease.DefaultGlobalPrefix {
			t.Errorf("NewGlobal(\"\") = %v, %v, want prefix %q", g, err, lease.DefaultGlobalPrefix)
		}
	})
}
