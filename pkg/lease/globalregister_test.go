package lease_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// TestGlobalRegister runs its rows in order on one etcd: each row sees what the rows before
// it registered.
func TestGlobalRegister(t *testing.T) {
	e := newGlobalEnv(t)
	east := lease.ClusterID{Name: "east", UID: "uid-a"}
	west := lease.ClusterID{Name: "west", UID: "uid-c"}
	rows := []struct {
		name   string
		before func(t *testing.T)
		id     lease.ClusterID
		engine string
		want   error
		msgs   []string // in the error
		writes bool     // the row writes keys
	}{
		{name: "new", id: east, engine: "/lw-a", writes: true},
		{name: "again: idempotent", id: east, engine: "/lw-a"},
		{name: "name taken by another UID", id: lease.ClusterID{Name: "east", UID: "uid-b"}, engine: "/lw-b",
			want: lease.ErrClusterNameTaken, msgs: []string{`"uid-a"`, `"uid-b"`, `"east"`}},
		{name: "engine prefix taken", id: west, engine: "/lw-a",
			want: lease.ErrClusterNameTaken, msgs: []string{`"/lw-a"`, `"east"`, `"uid-a"`, `"west"`}},
		{name: "same cluster, another engine prefix", id: east, engine: "/lw-other",
			want: lease.ErrClusterNameTaken, msgs: []string{`"/lw-a"`, `"/lw-other"`}},
		{name: "UID under another name", id: lease.ClusterID{Name: "east2", UID: "uid-a"}, engine: "/lw-e2",
			want: lease.ErrClusterNameTaken, msgs: []string{`"uid-a"`, `"east"`, `"east2"`}},
		{name: "second cluster", id: west, engine: "/lw-c", writes: true},
		{name: "engine key deleted by hand: put back", before: func(t *testing.T) {
			resp, err := e.cli.Delete(ctx(t), e.g.Prefix()+"/engines/%2Flw-c")
			if err != nil || resp.Deleted != 1 {
				t.Fatalf("delete engine key = %v, %v, want 1 deleted", resp, err)
			}
		}, id: west, engine: "/lw-c", writes: true},
		{name: "engine prefix of the repaired key", id: lease.ClusterID{Name: "north", UID: "uid-n"}, engine: "/lw-c",
			want: lease.ErrClusterNameTaken, msgs: []string{`"west"`}},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			if row.before != nil {
				row.before(t)
			}
			rev := e.rev(t)
			err := e.g.Register(ctx(t), row.id, row.engine)
			if row.want == nil && err != nil {
				t.Fatalf("Register(%+v, %q) = %v, want nil", row.id, row.engine, err)
			}
			if row.want != nil {
				if !errors.Is(err, row.want) {
					t.Fatalf("Register(%+v, %q) = %v, want %v", row.id, row.engine, err, row.want)
				}
				for _, m := range row.msgs {
					if !strings.Contains(err.Error(), m) {
						t.Errorf("Register error %q does not name %s", err, m)
					}
				}
			}
			if wrote := e.rev(t) != rev; wrote != row.writes {
				t.Fatalf("Register wrote: %v (revision %d -> %d), want %v", wrote, rev, e.rev(t), row.writes)
			}
		})
	}

	// What the rows left: one registration per cluster, no lease, naming its UID and prefix.
	for _, c := range []struct {
		key, want string
	}{
		{e.g.ClusterPath("east"), `{"name":"east","uid":"uid-a","enginePrefix":"/lw-a"}`},
		{e.g.ClusterPath("west"), `{"name":"west","uid":"uid-c","enginePrefix":"/lw-c"}`},
		{e.g.Prefix() + "/engines/%2Flw-a", `{"name":"east","uid":"uid-a","enginePrefix":"/lw-a"}`},
		{e.g.Prefix() + "/engines/%2Flw-c", `{"name":"west","uid":"uid-c","enginePrefix":"/lw-c"}`},
		{e.g.Prefix() + "/uids/uid-a", `{"name":"east","uid":"uid-a","enginePrefix":"/lw-a"}`},
		{e.g.Prefix() + "/uids/uid-c", `{"name":"west","uid":"uid-c","enginePrefix":"/lw-c"}`},
	} {
		kv := e.kv(t, c.key)
		if kv == nil || string(kv.Value) != c.want || kv.Lease != 0 {
			t.Errorf("%s = %v, want %s without a lease", c.key, kv, c.want)
		}
	}
	for _, absent := range []string{
		e.g.ClusterPath("north"), e.g.ClusterPath("east2"), e.g.Prefix() + "/uids/uid-b", e.g.Prefix() + "/uids/uid-n",
		e.g.Prefix() + "/engines/%2Flw-b", e.g.Prefix() + "/engines/%2Flw-other", e.g.Prefix() + "/engines/%2Flw-e2",
	} {
		if kv := e.kv(t, absent); kv != nil {
			t.Errorf("%s = %q, want absent: a refused registration writes nothing", absent, kv.Value)
		}
	}
}
