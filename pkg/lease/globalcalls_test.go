package lease_test

import (
	"context"
	"maps"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Each operation is the etcd calls docs/global.md gives it, and no more: Observe ONE
// transaction (K and T at one revision), Renew ONE keepalive, Grant a lease and one
// transaction (and a revoke when it fails). The rows run in order on one etcd.
func TestGlobalCalls(t *testing.T) {
	e := newGlobalEnv(t)
	gate := etcdtest.NewGate()
	g := e.gated(t, gate, e.g.Prefix())
	var token int64
	var id clientv3.LeaseID
	rows := []struct {
		name    string
		call    func(c context.Context) error
		want    map[string]int
		wantErr bool
	}{
		{"register", func(c context.Context) error {
			return g.Register(c, lease.ClusterID{Name: "east", UID: "u"}, "/lw")
		}, map[string]int{"Txn": 1}, false},
		{"register again", func(c context.Context) error {
			return g.Register(c, lease.ClusterID{Name: "east", UID: "u"}, "/lw")
		}, map[string]int{"Txn": 1}, false},
		{"observe", func(c context.Context) error { _, err := g.Observe(c, "n"); return err }, map[string]int{"Txn": 1}, false},
		{"grant", func(c context.Context) error {
			var err error
			token, id, err = g.Grant(c, "n", lease.GlobalGrantRequest{Basis: lease.GrantFirst, Record: record("east", "p", 30), TTL: 5 * time.Second}, e.guard)
			return err
		}, map[string]int{"LeaseGrant": 1, "Txn": 1}, false},
		{"failed grant", func(c context.Context) error {
			_, _, err := g.Grant(c, "n", lease.GlobalGrantRequest{Basis: lease.GrantFirst, Record: record("east", "p", 30), TTL: 5 * time.Second}, e.guard)
			return err
		}, map[string]int{"LeaseGrant": 1, "Txn": 1, "LeaseRevoke": 1}, true},
		{"confirm", func(c context.Context) error { _, err := g.Confirm(c, "n", token, e.guard); return err }, map[string]int{"Txn": 1}, false},
		{"renew", func(c context.Context) error { _, err := g.Renew(c, id); return err }, map[string]int{"LeaseKeepAlive": 1}, false},
		{"delete", func(c context.Context) error { _, err := g.Delete(c, "n", token, id, e.guard); return err }, map[string]int{"Txn": 1, "LeaseRevoke": 1}, false},
		{"delete again", func(c context.Context) error { _, err := g.Delete(c, "n", token, id, e.guard); return err }, map[string]int{"Txn": 1}, false},
		{"wait", func(c context.Context) error {
			_, err := g.Wait(c, "n", e.observe(t, "n"), waiting("east", 30), e.guard)
			return err
		}, map[string]int{"Txn": 1}, false},
	}
	counts := func() map[string]int {
		m := make(map[string]int)
		for _, name := range etcdMethods {
			if n := gate.Count(name); n > 0 {
				m[name] = n
			}
		}
		return m
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			c, cancel := context.WithTimeout(ctx(t), 5*time.Second)
			defer cancel()
			before := counts()
			if err := row.call(c); (err != nil) != row.wantErr {
				t.Fatalf("%s = %v, want error %v", row.name, err, row.wantErr)
			}
			got := counts()
			for m, n := range before {
				if got[m] -= n; got[m] == 0 {
					delete(got, m)
				}
			}
			if !maps.Equal(got, row.want) {
				t.Fatalf("%s sent %v, want %v", row.name, got, row.want)
			}
		})
	}
}
