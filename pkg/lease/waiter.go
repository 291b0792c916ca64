package lease

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// waiter is a blocking Acquire's entry in the queue of one key.
type waiter struct {
	s    *Session
	path string
	rev  int64 // the entry's CreateRevision: its place in the queue
}

// enqueue puts this session's entry in key's queue, or finds the one an
// earlier, interrupted Acquire of this session left there and keeps its place.
func (s *Session) enqueue(ctx context.Context, key, holder string) (*waiter, error) {
	path := s.eng.queuePath(key, s.id)
	w := &waiter{s: s, path: path}
	resp, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(path), "=", 0)).
		Then(clientv3.OpPut(path, value{Holder: holder}.encode(), clientv3.WithLease(s.id))).
		Else(clientv3.OpGet(path, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		// The entry may exist; enqueue again finds it, and leave deletes it
		// by lease, not revision.
		return w, fmt.Errorf("enqueue: %w", err)
	}
	w.rev = resp.Header.Revision
	if !resp.Succeeded {
		w.rev = resp.Responses[0].GetResponseRange().Kvs[0].CreateRevision
	}
	return w, nil
}

// leave deletes the waiter's entry (best effort; it is on the session's lease
// in any case, so it goes when the lease does).
func (w *waiter) leave(ctx context.Context) {
	cctx, cancel := w.s.cleanupContext(ctx)
	defer cancel()
	cmp := clientv3.Compare(clientv3.CreateRevision(w.path), "=", w.rev)
	if w.rev == 0 {
		cmp = clientv3.Compare(clientv3.LeaseValue(w.path), "=", w.s.id)
	}
	_, _ = w.s.cli.Txn(cctx).If(cmp).Then(clientv3.OpDelete(w.path)).Commit()
}

// reads reads what stands between the waiter and the lock: the lock key and
// its tombstone (lockReads), the waiter's own entry, and the entry just
// ahead of it. readQueue parses the last two.
func (w *waiter) reads(key string) []clientv3.Op {
	return append(w.s.lockReads(key),
		clientv3.OpGet(w.path, clientv3.WithKeysOnly()),
		clientv3.OpGet(w.s.eng.queueDir(key), append(clientv3.WithLastCreate(),
			clientv3.WithMaxCreateRev(w.rev-1), clientv3.WithKeysOnly())...))
}

// readQueue fills in lost and pred from the answers to the waiter's own
// entry and its predecessor.
func (w *waiter) readQueue(o *obstacle, rs []*etcdserverpb.ResponseOp) {
	own := rs[0].GetResponseRange().Kvs
	o.lost = len(own) == 0 || own[0].CreateRevision != w.rev
	if kvs := rs[1].GetResponseRange().Kvs; len(kvs) > 0 {
		o.pred = kvs[0]
	}
}

// look reads what stands between the waiter and the lock with one
// read-only, linearizable transaction (no raft write, no fsync). A waiter
// that woke because its predecessor's entry went usually finds the lock
// held by that predecessor: looking first spares etcd an acquire
// transaction that would fail (a Txn with a Put is a raft write even when its
// compare fails). The error is etcd's; nothing was written.
func (w *waiter) look(ctx context.Context, key string) (obstacle, error) {
	resp, err := w.s.cli.Txn(ctx).Then(w.reads(key)...).Commit()
	if err != nil {
		return obstacle{}, fmt.Errorf("read queue: %w", err)
	}
	var o obstacle
	o.readLock(resp.Responses)
	w.readQueue(&o, resp.Responses[2:])
	return o, nil
}

// join is a blocking Acquire's first transaction (without WithGuard
// compares): it takes the lock as TryAcquire does when the lock is free and
// nobody queues, and otherwise queues the waiter and reads what it waits
// for, all in one write:
//
//	If(CreateRevision(key) == 0, tombstone absent, queue empty)
//	Then(Put(key, {holder, record}, WithLease(session)))
//	Else(Put(entry, WithLease(session)), Get(key), Get(tombstone), Get(entry),
//	     Get(the two newest entries))
//
// Reads in a transaction see its own writes, so the Else branch reads the
// entry it just put: its CreateRevision is the transaction's revision, the
// newest in the queue, and the other of the two newest entries is its
// predecessor. A Put over an entry that an interrupted Acquire of this
// session left keeps that entry's CreateRevision (its place); the
// predecessor is then unknown, and known is false. The returned error wraps
// ErrUnknownOutcome when etcd's answer was not received (the key or the entry may
// exist).
func (s *Session) join(ctx context.Context, key string, v value) (l *Lock, w *waiter, o obstacle, known bool, err error) {
	e := s.eng
	path, tomb, qdir := e.Path(key), e.tombPath(key), e.queueDir(key)
	w = &waiter{s: s, path: e.queuePath(key, s.id)}
	els := append([]clientv3.Op{
		clientv3.OpPut(w.path, value{Holder: v.Holder}.encode(), clientv3.WithLease(s.id)),
	}, s.lockReads(key)...)
	els = append(els,
		clientv3.OpGet(w.path, clientv3.WithKeysOnly()),
		clientv3.OpGet(qdir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2)))

	sent := now()
	resp, err := s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(path), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(tomb), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(qdir), "=", 0).WithPrefix(),
	).Then(
		clientv3.OpPut(path, v.encode(), clientv3.WithLease(s.id)),
	).Else(els...).Commit()
	if err != nil {
		if !unknownOutcome(err) {
			// etcd refused it: nothing was written, nothing to find out.
			return nil, nil, obstacle{sent: sent}, true, err
		}
		return nil, w, obstacle{sent: sent}, false, fmt.Errorf("%w: %w", ErrUnknownOutcome, err)
	}
	if resp.Succeeded {
		l, err := s.granted(ctx, key, v, resp.Header.Revision, sent)
		return l, nil, obstacle{}, true, err
	}
	rs := resp.Responses[1:]
	o = obstacle{sent: sent}
	o.readLock(rs)
	own := rs[2].GetResponseRange().Kvs
	if len(own) == 0 {
		// Cannot happen: the Put just before this read created it.
		return nil, w, o, false, fmt.Errorf("%w: queue entry not found after put", ErrLocked)
	}
	w.rev = own[0].CreateRevision
	if w.rev != resp.Header.Revision {
		return nil, w, o, false, o.err()
	}
	for _, kv := range rs[3].GetResponseRange().Kvs {
		if kv.CreateRevision < w.rev {
			o.pred = kv
		}
	}
	return nil, w, o, true, o.err()
}
