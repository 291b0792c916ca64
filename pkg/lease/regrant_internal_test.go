package lease

import (
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// A regrant that did not apply is a failed guard only when its Else reads
// show every engine compare held; otherwise it lost a race (read again).
func TestRegrantFailure(t *testing.T) {
	const rev = 10
	w := &waiter{rev: rev}
	rng := func(kvs ...*mvccpb.KeyValue) *etcdserverpb.ResponseOp {
		return &etcdserverpb.ResponseOp{Response: &etcdserverpb.ResponseOp_ResponseRange{
			ResponseRange: &etcdserverpb.RangeResponse{Kvs: kvs}}}
	}
	kv := func(create int64) *mvccpb.KeyValue { return &mvccpb.KeyValue{Key: []byte("k"), CreateRevision: create} }
	// The waiter's reads: lock key, tombstone, own entry, the entry ahead.
	reads := func(lock, tomb, own, pred *etcdserverpb.ResponseOp) []*etcdserverpb.ResponseOp {
		return []*etcdserverpb.ResponseOp{lock, tomb, own, pred}
	}
	for _, tc := range []struct {
		name string
		rs   []*etcdserverpb.ResponseOp
		want error
	}{
		{"no guards: no Else reads", nil, errRegrantRaced},
		{"the entry is the grant: a guard failed", reads(rng(), rng(), rng(kv(rev)), rng()), ErrGuardFailed},
		{"a lock key", reads(rng(kv(rev+5)), rng(), rng(kv(rev)), rng()), errRegrantRaced},
		{"a tombstone", reads(rng(), rng(kv(rev+5)), rng(kv(rev)), rng()), errRegrantRaced},
		{"own entry gone", reads(rng(), rng(), rng(), rng()), errRegrantRaced},
		{"own entry replaced", reads(rng(), rng(), rng(kv(rev+3)), rng()), errRegrantRaced},
		{"an entry ahead", reads(rng(), rng(), rng(kv(rev)), rng(kv(rev-1))), errRegrantRaced},
	} {
		if err := regrantFailure(w, tc.rs); !errors.Is(err, tc.want) {
			t.Errorf("%s: regrantFailure = %v, want %v", tc.name, err, tc.want)
		}
	}
}
