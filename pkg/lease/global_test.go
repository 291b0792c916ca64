package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/clock"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// genv is one test's etcd with the global side of it and two guards: one that holds and one
// that does not.
type genv struct {
	*env
	g       *lease.Global
	guard   clientv3.Cmp // holds
	noGuard clientv3.Cmp // does not hold
}

func newGlobalEnv(t *testing.T) *genv {
	t.Helper()
	e := newEnv(t)
	g, err := lease.NewGlobal(e.cli, prefix(t)+"-global")
	if err != nil {
		t.Fatalf("NewGlobal = %v, want nil", err)
	}
	if _, err := e.cli.Put(ctx(t), "/guard/ok", "owner"); err != nil {
		t.Fatalf("put guard key: %v", err)
	}
	return &genv{
		env:     e,
		g:       g,
		guard:   clientv3.Compare(clientv3.CreateRevision("/guard/ok"), ">", 0),
		noGuard: clientv3.Compare(clientv3.CreateRevision("/guard/missing"), ">", 0),
	}
}

// gated returns a Global under prefix whose etcd calls go through gate.
func (e *genv) gated(t *testing.T, gate *etcdtest.Gate, prefix string) *lease.Global {
	t.Helper()
	g, err := lease.NewGlobal(e.srv.Client(t, gate.DialOptions()...), prefix)
	if err != nil {
		t.Fatalf("NewGlobal(%q) = %v", prefix, err)
	}
	return g
}

// record is a complete record of the cluster named cluster for pod.
func record(cluster, pod string, delay int32) lease.GlobalRecord {
	return lease.GlobalRecord{
		Cluster:      lease.ClusterID{Name: cluster, UID: "uid-" + cluster},
		Object:       "obj-" + cluster,
		Holder:       pod,
		HolderUID:    "pod-uid-" + pod,
		DelaySeconds: delay,
	}
}

// waiting is a complete waiting record of the cluster named cluster.
func waiting(cluster string, delay int32) lease.GlobalRecord {
	r := record(cluster, "", delay)
	r.Holder, r.HolderUID = "", ""
	return r
}

// observe reads name with Observe.
func (e *genv) observe(t *testing.T, name string) lease.GlobalView {
	t.Helper()
	v, err := e.g.Observe(ctx(t), name)
	if err != nil {
		t.Fatalf("Observe(%q) = %v, want nil", name, err)
	}
	return v
}

// first grants name by GrantFirst to rec with a TTL of ttl.
func (e *genv) first(t *testing.T, name string, rec lease.GlobalRecord, ttl time.Duration) (int64, clientv3.LeaseID) {
	t.Helper()
	token, id, err := e.g.Grant(ctx(t), name, lease.GlobalGrantRequest{Basis: lease.GrantFirst, Record: rec, TTL: ttl}, e.guard)
	if err != nil {
		t.Fatalf("Grant(%q, first) = %v, want nil", name, err)
	}
	return token, id
}

// kv reads key, nil if absent.
func (e *genv) kv(t *testing.T, key string) *mvccpb.KeyValue {
	t.Helper()
	resp, err := e.cli.Get(ctx(t), key)
	if err != nil {
		t.Fatalf("Get(%q) = %v, want nil", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	return resp.Kvs[0]
}

// state is K's and T's key-values of name, for checking that nothing was written.
func (e *genv) state(t *testing.T, name string) [2]string {
	t.Helper()
	var s [2]string
	for i, k := range []string{e.g.GrantPath(name), e.g.TombstonePath(name)} {
		if kv := e.kv(t, k); kv != nil {
			s[i] = kv.String()
		}
	}
	return s
}

// rev returns etcd's current revision.
func (e *genv) rev(t *testing.T) int64 {
	t.Helper()
	resp, err := e.cli.Get(ctx(t), "/guard/ok")
	if err != nil {
		t.Fatalf("Get = %v, want nil", err)
	}
	return resp.Header.Revision
}

// ttlOf returns etcd's TimeToLive TTL of the lease: -1 when it is gone.
func (e *genv) ttlOf(t *testing.T, id clientv3.LeaseID) int64 {
	t.Helper()
	resp, err := e.cli.TimeToLive(ctx(t), id)
	if err != nil {
		t.Fatalf("TimeToLive(%x) = %v, want nil", id, err)
	}
	return resp.TTL
}

// noNewLease fails the test if etcd has a lease that before did not list.
func (e *genv) noNewLease(t *testing.T, before map[clientv3.LeaseID]bool) {
	t.Helper()
	for id := range leases(t, e.cli) {
		if !before[id] {
			t.Errorf("lease %x left behind (TimeToLive TTL %d), want it revoked", id, e.ttlOf(t, id))
		}
	}
}

func TestGlobalObserve(t *testing.T) {
	e := newGlobalEnv(t)

	t.Run("nothing", func(t *testing.T) {
		before := clock.Now()
		v := e.observe(t, "none")
		after := clock.Now()
		if v.Rev <= 0 || v.Held || v.Token != 0 || v.Lease != 0 || v.TCreate != 0 || v.TMod != 0 {
			t.Fatalf("Observe of nothing = %+v, want only Rev set", v)
		}
		if v.Grant != (lease.GlobalRecord{}) || v.Tomb != (lease.GlobalRecord{}) {
			t.Fatalf("Observe of nothing has records %+v, %+v, want zero", v.Grant, v.Tomb)
		}
		if v.ReceivedAt < before || v.ReceivedAt > after {
			t.Fatalf("ReceivedAt = %d, want within the call [%d, %d]", v.ReceivedAt, before, after)
		}
	})

	t.Run("K and T", func(t *testing.T) {
		rec := record("east", "p", 30)
		token, id := e.first(t, "held", rec, 5*time.Second)
		sent := clock.Now()
		v := e.observe(t, "held")
		rec.Kind = lease.RecordGrant
		if !v.Held || v.Token != token || v.Lease != id || v.Grant != rec {
			t.Fatalf("Observe K = held %v token %d lease %x record %+v, want true, %d, %x, %+v", v.Held, v.Token, v.Lease, v.Grant, token, id, rec)
		}
		if v.TCreate != token || v.TMod != token || v.Tomb != rec {
			t.Fatalf("Observe T = create %d mod %d record %+v, want %d, %d, %+v", v.TCreate, v.TMod, v.Tomb, token, token, rec)
		}
		if v.Rev < token || v.ReceivedAt < sent {
			t.Fatalf("Observe Rev %d ReceivedAt %d, want >= token %d and >= %d", v.Rev, v.ReceivedAt, token, sent)
		}
	})

	t.Run("T without K", func(t *testing.T) {
		token, id := e.first(t, "ended", record("east", "p", 30), 5*time.Second)
		if deleted, err := e.g.Delete(ctx(t), "ended", token, id, e.guard); err != nil || !deleted {
			t.Fatalf("Delete = %v, %v, want true, nil", deleted, err)
		}
		v := e.observe(t, "ended")
		if v.Held || v.Token != 0 || v.Lease != 0 || v.Grant != (lease.GlobalRecord{}) {
			t.Fatalf("Observe K after Delete = %+v, want absent", v)
		}
		if v.TMod != token || v.Tomb.Kind != lease.RecordGrant || v.Rev <= token {
			t.Fatalf("Observe T after Delete = mod %d kind %q at %d, want %d, grant, above it", v.TMod, v.Tomb.Kind, v.Rev, token)
		}
	})

	// A record the engine cannot read is an error that names its key, never a zero record.
	bad := []struct {
		name, key, value, msg string
	}{
		{"K not JSON", "grants", "not json", "does not parse"},
		{"T not JSON", "tombstones", `{"kind":`, "does not parse"},
		{"K unknown kind", "grants", `{"kind":"retiring"}`, `kind "retiring"`},
		{"T no kind", "tombstones", `{"object":"x"}`, `kind ""`},
	}
	for i, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			name := "bad" + string(rune('a'+i))
			key := e.g.Prefix() + "/" + tc.key + "/" + name
			if _, err := e.cli.Put(ctx(t), key, tc.value); err != nil {
				t.Fatalf("Put(%q) = %v", key, err)
			}
			v, err := e.g.Observe(ctx(t), name)
			if err == nil || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("Observe(%q) = %+v, %v, want an error naming %s and %q", name, v, err, key, tc.msg)
			}
			if errors.Is(err, lease.ErrInvalid) || v != (lease.GlobalView{}) {
				t.Fatalf("Observe(%q) = %+v, %v, want a zero view and no ErrInvalid (not the caller's input)", name, v, err)
			}
		})
	}
}
