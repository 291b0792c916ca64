package fence

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Put writes key = val in etcd only while l holds its lock: one transaction
// If(l.IsOwner()) Then(Put). It fails with lease.ErrNotHeld if the lock is no
// longer this grant, whatever l believes locally.
func Put(ctx context.Context, l *lease.Lock, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	resp, err := Txn(ctx, l).Then(clientv3.OpPut(key, val, opts...)).Commit()
	if err != nil {
		return nil, fmt.Errorf("fenced put %s: %w", key, err)
	}
	return (*clientv3.PutResponse)(resp.Responses[0].GetResponsePut()), nil
}

// Txn returns an etcd transaction that applies only while l holds its lock:
// Commit prepends l.IsOwner() to the compares. If the lock compare fails,
// Commit returns an error wrapping lease.ErrNotHeld; if only the caller's
// compares fail, it returns the response with Succeeded false and the Else
// results, like any transaction. The Else branch gets one extra read (of the
// lock key), so it may hold one operation less than etcd's limit.
func Txn(ctx context.Context, l *lease.Lock) clientv3.Txn {
	return &txn{ctx: ctx, l: l}
}

type txn struct {
	ctx               context.Context
	l                 *lease.Lock
	cmps              []clientv3.Cmp
	then, els         []clientv3.Op
	cif, cthen, celse bool
}

// If adds compares; like clientv3, it panics if called twice or after Then
// or Else.
func (t *txn) If(cs ...clientv3.Cmp) clientv3.Txn {
	if t.cif || t.cthen || t.celse {
		panic("fence: If after If, Then or Else")
	}
	t.cif = true
	t.cmps = cs
	return t
}

// Then sets the operations run when every compare holds.
func (t *txn) Then(ops ...clientv3.Op) clientv3.Txn {
	if t.cthen || t.celse {
		panic("fence: Then after Then or Else")
	}
	t.cthen = true
	t.then = ops
	return t
}

// Else sets the operations run when a compare fails.
func (t *txn) Else(ops ...clientv3.Op) clientv3.Txn {
	if t.celse {
		panic("fence: Else after Else")
	}
	t.celse = true
	t.els = ops
	return t
}

// Commit runs the transaction.
func (t *txn) Commit() (*clientv3.TxnResponse, error) {
	cmps := append([]clientv3.Cmp{t.l.IsOwner()}, t.cmps...)
	els := append(append([]clientv3.Op(nil), t.els...), clientv3.OpGet(t.l.Path(), clientv3.WithKeysOnly()))
	resp, err := t.l.Session().Client().Txn(t.ctx).If(cmps...).Then(t.then...).Else(els...).Commit()
	if err != nil {
		return nil, err
	}
	if resp.Succeeded {
		return resp, nil
	}
	last := resp.Responses[len(resp.Responses)-1]
	resp.Responses = resp.Responses[:len(resp.Responses)-1]
	if kvs := last.GetResponseRange().Kvs; len(kvs) == 1 && kvs[0].CreateRevision == t.l.Token() {
		return resp, nil
	}
	return resp, fmt.Errorf("lock %s: %w: token %d", t.l.Key(), lease.ErrNotHeld, t.l.Token())
}
