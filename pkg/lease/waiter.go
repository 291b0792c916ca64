package lease

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// waiter is a blocking Acquire's entry in the queue of one key.
type waiter struct {
	s     *Session
	key   string
	path  string
	value string // the entry's value: the holder, the record and the call's ID
	rev   int64  // the entry's CreateRevision: its place in the queue, and its token once it is the grant
	// seen is the send time of the newest linearizable request that showed
	// the entry not yet the grant (something ahead of it): the entry became
	// the grant after it, so a grant learned from history (lookAt) counts
	// its validity from there. Zero when no such request is known.
	seen instant
	// outrun says a read showed a lock key created after the entry (an
	// older protocol's waiter took the lock: regrant.go): the entry's own
	// revision is no longer a growing token, and the waiter takes the lock
	// by regrant once its entry is the grant.
	outrun bool
}

// newWaiter returns the (not yet written) queue entry of an acquire of key
// with value v. The entry carries the whole value (record included): it
// becomes the lock's grant when everything ahead of it is gone.
func (s *Session) newWaiter(key string, v value) *waiter {
	return &waiter{s: s, key: key, path: s.eng.queuePath(key, s.id), value: v.encode()}
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
			If(append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(w.path), "=", 0)}, s.eng.callAlive(v)...)...).
			Then(clientv3.OpPut(w.path, w.value, clientv3.WithLease(s.id))).
			Else(append([]clientv3.Op{clientv3.OpGet(w.path)}, s.eng.stateReads(key)...)...).
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
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			// Only the call's tombstone fails the compare: the call gave up.
			return w, fmt.Errorf("enqueue: %w: the call's tombstone %s exists", ErrInvalid, s.eng.gonePath(v.Call))
		}
		kv := kvs[0]
		if string(kv.Value) == w.value {
			w.rev = kv.CreateRevision
			return w, nil
		}
		if g := readState(resp.Responses[1:]).owner(); g != nil && g.CreateRevision == kv.CreateRevision {
			if s.leftoverAt(w.path) {
				// A failed call of this session left it and the session is
				// deleting it: as a lock key so left, this call (holding
				// the key's busy mark) deletes it, handing the lock on, and
				// queues at the back.
				if s.cleanNow(ctx, w.path) {
					continue
				}
				return w, fmt.Errorf("enqueue: %w", errLeftGrant)
			}
			// The entry another call left is the lock's grant (a Lock
			// that lapsed, or a resumed lease's not yet adopted): like a
			// lock key of this lease, it stays for Adopt or Release, and
			// waiting behind it would never end.
			return w, &HeldError{Holder: decodeValue(g.Value).Holder, Token: g.CreateRevision, Lease: s.id}
		}
		if err := w.dropStale(ctx, kv.CreateRevision); err != nil {
			return w, err
		}
	}
	return w, fmt.Errorf("enqueue: %w: a stale queue entry of this lease keeps coming back", ErrLocked)
}

// errLeftGrant says that an entry a failed call of this session left is the
// lock's grant and its delete did not get through yet: the caller backs off
// and tries again.
var errLeftGrant = errors.New("lease: a queue entry an earlier call left is the grant, and its delete has not got through yet")

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
// ahead of it. readQueue parses the last two. opts apply to every read.
func (w *waiter) reads(opts ...clientv3.OpOption) []clientv3.Op {
	return append(w.s.lockReads(w.key, opts...),
		clientv3.OpGet(w.path, append([]clientv3.OpOption{clientv3.WithKeysOnly()}, opts...)...),
		clientv3.OpGet(w.s.eng.queueDir(w.key), append(append(clientv3.WithLastCreate(),
			clientv3.WithMaxCreateRev(w.rev-1), clientv3.WithKeysOnly()), opts...)...))
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
// read-only, linearizable transaction (no raft write, no fsync): nothing, if
// the waiter's entry is the grant now (take). With guards, the transaction
// is If(guards) Then(reads) Else(reads), and o.guarded says which ran. The
// error is etcd's; nothing was written.
func (w *waiter) look(ctx context.Context, guards []clientv3.Cmp) (obstacle, error) {
	// A deadline on the read: one hung etcd member (stopped, not refusing) would otherwise
	// hold the waiter, and everyone queued behind it, for as long as it hangs; after the
	// deadline the caller backs off and the client's balancer sends the next read elsewhere.
	ctx, cancel := w.s.callContext(ctx)
	defer cancel()
	reads := w.reads()
	txn := w.s.cli.Txn(ctx).Then(reads...)
	if len(guards) > 0 {
		txn = w.s.cli.Txn(ctx).If(guards...).Then(reads...).Else(reads...)
	}
	o := obstacle{sent: now()}
	resp, err := txn.Commit()
	if err != nil {
		return o, fmt.Errorf("read queue: %w", err)
	}
	o.guarded, o.rev = resp.Succeeded, resp.Header.Revision
	o.readLock(resp.Responses)
	w.readQueue(&o, resp.Responses[2:])
	w.notice(o.holder)
	if o.blocked() {
		w.seen = o.sent
	}
	return o, nil
}

// lookAt reads what stood between the waiter and the lock at revision rev,
// the revision of a change its watch reported, with serializable reads: etcd's
// history at a given revision is fixed, so any member that has applied rev
// answers it without a raft round (a linearizable read waits for the write
// in flight, often the previous holder's next acquire). If the entry was the
// grant at rev, it is still (a grant stays one until its key goes, owner.go);
// its validity then counts from w.seen, sent before rev. The error is etcd's
// (a member behind rev, a compacted rev): the caller reads linearizably.
func (w *waiter) lookAt(ctx context.Context, rev int64) (obstacle, error) {
	ctx, cancel := w.s.callContext(ctx)
	defer cancel()
	o := obstacle{sent: w.seen, guarded: true, rev: rev}
	resp, err := w.s.cli.Txn(ctx).Then(w.reads(clientv3.WithRev(rev), clientv3.WithSerializable())...).Commit()
	if err != nil {
		return o, fmt.Errorf("read queue at revision %d: %w", rev, err)
	}
	o.readLock(resp.Responses)
	w.readQueue(&o, resp.Responses[2:])
	w.notice(o.holder)
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
// queues at the back. Which compare guards what: the three of TryAcquire's
// transaction (grabTxn) decide between taking the lock key and queuing; the
// nested one keeps an existing entry (this call's, or a stale one that
// enqueue deals with) from being overwritten. The returned error wraps
// ErrUnknownOutcome when etcd's answer was not received (the key or the entry
// may exist); an error etcd refused the transaction with is returned as is,
// with known true.
func (s *Session) join(ctx context.Context, key string, v value) (l *Lock, w *waiter, o obstacle, known bool, err error) {
	e := s.eng
	path, tomb, qdir := e.Path(key), e.tombPath(key), e.queueDir(key)
	w = s.newWaiter(key, v)
	els := append([]clientv3.Op{
		clientv3.OpTxn(
			append([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(w.path), "=", 0)}, e.callAlive(v)...),
			[]clientv3.Op{clientv3.OpPut(w.path, w.value, clientv3.WithLease(s.id))}, nil),
	}, s.lockReads(key)...)
	els = append(els,
		clientv3.OpGet(w.path),
		clientv3.OpGet(qdir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2)))

	sent := now()
	tctx, cancel := s.callContext(ctx)
	defer cancel()
	resp, err := s.cli.Txn(tctx).If(append([]clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(path), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(tomb), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(qdir), "=", 0).WithPrefix(),
	}, e.callAlive(v)...)...).Then(
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
	// Nothing ahead and the lock free: the entry is the grant already (the
	// queue held only entries that went in between, or ours).
	o.guarded, o.rev = true, resp.Header.Revision
	if o.blocked() {
		w.seen = sent
	}
	l, err = s.take(ctx, w, v, o, nil) // join has no guards
	return l, w, o, true, err
}
