package lease

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// waiter is a blocking Acquire's entry in the queue of one key.
type waiter struct {
	s     *Session
	key   string
	path  string
	value string // the entry's value: the holder and the call's ID
	rev   int64  // the entry's CreateRevision: its place in the queue
}

// newWaiter returns the (not yet written) queue entry of an acquire of key
// with value v.
func (s *Session) newWaiter(key string, v value) *waiter {
	return &waiter{
		s: s, key: key, path: s.eng.queuePath(key, s.id),
		value: value{Holder: v.Holder, Call: v.Call}.encode(),
	}
}

// enqueue puts this call's entry at the back of key's queue. An entry of this
// call that an earlier, interrupted enqueue or join created keeps its place;
// an entry that another call of this session left there (the same etcd key:
// one entry per lease) is deleted first, so that this call does not take its
// place ahead of waiters that came after it.
func (s *Session) enqueue(ctx context.Context, key string, v value) (*waiter, error) {
	w := s.newWaiter(key, v)
	for range 3 {
		tctx, cancel := s.callContext(ctx)
		resp, err := s.cli.Txn(tctx).
			If(clientv3.Compare(clientv3.CreateRevision(w.path), "=", 0)).
			Then(clientv3.OpPut(w.path, w.value, clientv3.WithLease(s.id))).
			Else(clientv3.OpGet(w.path)).
			Commit()
		cancel()
		if err != nil {
			// The entry may exist; enqueue again finds it, and the clean-up
			// deletes it by value.
			return w, fmt.Errorf("enqueue: %w", err)
		}
		if resp.Succeeded {
			w.rev = resp.Header.Revision
			return w, nil
		}
		kv := resp.Responses[0].GetResponseRange().Kvs[0]
		if string(kv.Value) == w.value {
			w.rev = kv.CreateRevision
			return w, nil
		}
		if err := w.dropStale(ctx, kv.CreateRevision); err != nil {
			return w, err
		}
	}
	return w, fmt.Errorf("enqueue: %w: a stale queue entry of this lease keeps coming back", ErrLocked)
}

// dropStale deletes the entry at the waiter's key that another call left
// (created at rev).
func (w *waiter) dropStale(ctx context.Context, rev int64) error {
	_, err := w.s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(w.path), "=", rev)).
		Then(clientv3.OpDelete(w.path)).
		Commit()
	if err != nil {
		return fmt.Errorf("delete stale queue entry: %w", err)
	}
	return nil
}

// leftover is the waiter's entry as something to clean up.
func (w *waiter) leftover() leftover {
	return leftover{key: w.key, path: w.path, value: w.value}
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
	// A deadline on the read: one hung etcd member (stopped, not refusing) would otherwise
	// hold the waiter, and everyone queued behind it, for as long as it hangs; after the
	// deadline the caller backs off and the client's balancer sends the next read elsewhere.
	ctx, cancel := w.s.callContext(ctx)
	defer cancel()
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
//	Else(Txn(If(entry absent) Then(Put(entry, WithLease(session)))),
//	     Get(key), Get(tombstone), Get(entry), Get(the two newest entries))
//
// Reads in a transaction see its own writes, so the Else branch reads the
// entry it just put: its CreateRevision is the transaction's revision, the
// newest in the queue, and the other of the two newest entries is its
// predecessor. An entry that was there already is not overwritten: if this
// call wrote it (an earlier join whose answer was lost) it keeps its place
// and the predecessor is unknown (known is false); if another call left it,
// the waiter's rev is 0 and known is false, so that enqueue deletes it and
// queues at the back. The returned error wraps ErrUnknownOutcome when etcd's
// answer was not received (the key or the entry may exist); an error etcd
// refused the transaction with is returned as is, with known true.
func (s *Session) join(ctx context.Context, key string, v value) (l *Lock, w *waiter, o obstacle, known bool, err error) {
	e := s.eng
	path, tomb, qdir := e.Path(key), e.tombPath(key), e.queueDir(key)
	w = s.newWaiter(key, v)
	els := append([]clientv3.Op{
		clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(w.path), "=", 0)},
			[]clientv3.Op{clientv3.OpPut(w.path, w.value, clientv3.WithLease(s.id))}, nil),
	}, s.lockReads(key)...)
	els = append(els,
		clientv3.OpGet(w.path),
		clientv3.OpGet(qdir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2)))

	sent := now()
	tctx, cancel := s.callContext(ctx)
	defer cancel()
	resp, err := s.cli.Txn(tctx).If(
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
		// Cannot happen: the entry was there or the nested Put created it.
		return nil, w, o, false, fmt.Errorf("%w: queue entry not found after put", ErrLocked)
	}
	// The value tells whose the entry is; the revision alone does not: a
	// transaction that wrote nothing (the entry was there) has the revision
	// of the last write, which can be the entry's own.
	if string(own[0].Value) != w.value {
		w.rev = 0 // another call's: enqueue deletes it
		return nil, w, o, false, o.err()
	}
	w.rev = own[0].CreateRevision
	if w.rev != resp.Header.Revision {
		return nil, w, o, false, o.err() // an earlier join of this call put it
	}
	for _, kv := range rs[3].GetResponseRange().Kvs {
		if kv.CreateRevision < w.rev {
			o.pred = kv
		}
	}
	return nil, w, o, true, o.err()
}
