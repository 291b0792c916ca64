package lease

import (
	"context"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// semState is what one linearizable read of a semaphore of n slots saw
// (semaphore.go): each slot's lock key, tombstone and oldest mutex waiter,
// the slot keys at indexes at or above n, and the semaphore's queue as seen
// by a waiter (its own entry, the one ahead) or by TryAcquireSlot (the
// oldest entry and the count).
type semState struct {
	rev   int64
	slots []slotView
	above []*mvccpb.KeyValue // slot keys at index >= n: a caller with more slots

	lost bool             // waiter: its entry is gone
	pred *mvccpb.KeyValue // waiter: the entry just ahead of it

	oldest  *mvccpb.KeyValue // TryAcquireSlot: the oldest entry
	waiters int64            // TryAcquireSlot: the number of entries
}

// slotView is one slot of a semState.
type slotView struct {
	lock, tomb, queued *mvccpb.KeyValue
}

// blocker is the key that keeps the slot from being free, nil when it is
// free: its lock key (the grant), else its tombstone, else its oldest mutex
// waiter (then the grant by the ownership rule, owner.go).
func (v slotView) blocker() *mvccpb.KeyValue {
	switch {
	case v.lock != nil:
		return v.lock
	case v.tomb != nil:
		return v.tomb
	}
	return v.queued
}

// freeSlot returns the lowest free slot, or -1.
func (st semState) freeSlot() int {
	for i, v := range st.slots {
		if v.blocker() == nil {
			return i
		}
	}
	return -1
}

// blockers returns the key in the way of each slot (all are held).
func (st semState) blockers() []*mvccpb.KeyValue {
	kvs := make([]*mvccpb.KeyValue, 0, len(st.slots))
	for _, v := range st.slots {
		if b := v.blocker(); b != nil {
			kvs = append(kvs, b)
		}
	}
	return kvs
}

// mine returns the index of a slot whose lock key carries exactly value on
// lease id (a grant of this call whose answer was lost), or -1.
func (st semState) mine(value string, lease int64) int {
	for i, v := range st.slots {
		if v.lock != nil && v.lock.Lease == lease && string(v.lock.Value) == value {
			return i
		}
	}
	return -1
}

// mismatch returns an ErrInvalid when st shows the semaphore used with
// another slot count than n: a slot key beyond n, a slot key or the entry
// ahead (or the oldest entry) that records another count. Keys that record
// no count (a controller's grant, a mutex's key) are no disagreement.
func (st semState) mismatch(name string, n int) error {
	if len(st.above) > 0 {
		kv := st.above[0]
		return invalidf("semaphore %q has a slot key %s (held by %q): it is used with more than %d slots",
			name, kv.Key, decodeValue(kv.Value).Holder, n)
	}
	check := func(what string, kv *mvccpb.KeyValue) error {
		if kv == nil {
			return nil
		}
		if v := decodeValue(kv.Value); v.Slots != 0 && v.Slots != n {
			return invalidf("semaphore %q is used with %d slots by %s %q, not %d", name, v.Slots, what, v.Holder, n)
		}
		return nil
	}
	for _, v := range st.slots {
		if err := check("the holder", v.lock); err != nil {
			return err
		}
	}
	if err := check("the waiter", st.pred); err != nil {
		return err
	}
	return check("the waiter", st.oldest)
}

// semReadOps is the number of operations of semReads for n slots.
func semReadOps(n int) int { return 2 + 2*n + 2 }

// semReads are the reads of a semState, waiter's or (entry "") TryAcquireSlot's;
// parseSem parses their answers.
func (e *Engine) semReads(name string, n int, entry string, rev int64) []clientv3.Op {
	ops := []clientv3.Op{
		clientv3.OpGet(e.Path(name)),
		clientv3.OpGet(e.Path(name)+slotInfix, clientv3.WithPrefix()),
	}
	for i := range n {
		k := SlotKey(name, i)
		ops = append(ops,
			clientv3.OpGet(e.tombPath(k), clientv3.WithKeysOnly()),
			clientv3.OpGet(e.queueDir(k), append(clientv3.WithFirstCreate(), clientv3.WithKeysOnly())...))
	}
	dir := e.semDir(name)
	if entry != "" {
		return append(ops,
			clientv3.OpGet(entry, clientv3.WithKeysOnly()),
			clientv3.OpGet(dir, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(rev-1))...))
	}
	return append(ops,
		clientv3.OpGet(dir, clientv3.WithFirstCreate()...),
		clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithCountOnly()))
}

// parseSem parses the answers to semReads.
func (e *Engine) parseSem(name string, n int, waiterRev int64, resp *clientv3.TxnResponse) semState {
	rs := resp.Responses
	first := func(r *etcdserverpb.ResponseOp) *mvccpb.KeyValue {
		if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
			return kvs[0]
		}
		return nil
	}
	st := semState{rev: resp.Header.Revision, slots: make([]slotView, n)}
	st.slots[0].lock = first(rs[0])
	root := e.Path(name) + slotInfix
	for _, kv := range rs[1].GetResponseRange().Kvs {
		i, ok := slotIndex(strings.TrimPrefix(string(kv.Key), root))
		switch {
		case !ok:
			// Not a slot key ("name/slot/x/y"): another lock, ignored.
		case i < n:
			st.slots[i].lock = kv
		default:
			st.above = append(st.above, kv)
		}
	}
	for i := range n {
		st.slots[i].tomb, st.slots[i].queued = first(rs[2+2*i]), first(rs[3+2*i])
	}
	q := rs[2+2*n:]
	if waiterRev > 0 {
		own := first(q[0])
		st.lost = own == nil || own.CreateRevision != waiterRev
		st.pred = first(q[1])
		return st
	}
	st.oldest, st.waiters = first(q[0]), q[1].GetResponseRange().Count
	return st
}

// readSem reads the semaphore linearizably, as the waiter whose entry is at
// entry with CreateRevision rev sees it, or (entry "") as TryAcquireSlot.
func (s *Session) readSem(ctx context.Context, name string, n int, entry string, rev int64) (semState, error) {
	ctx, cancel := s.callContext(ctx)
	defer cancel()
	resp, err := s.cli.Txn(ctx).Then(s.eng.semReads(name, n, entry, rev)...).Commit()
	if err != nil {
		return semState{}, fmt.Errorf("read semaphore: %w", err)
	}
	return s.eng.parseSem(name, n, rev, resp), nil
}

// grantSlot sends the grant of slot i (semaphore.go's transaction) with
// value v, from the read st; the waiter's entry is at entry with
// CreateRevision rev, or entry is "" for TryAcquireSlot; the call's tombstone
// is at gone, and bury, if set (gone too), puts it with the grant. It returns the
// grant's revision (the token), 0 when a compare of the engine failed (the
// caller reads again), or ErrGuardFailed when they held and a guard did not.
// sent is always set; the error wraps ErrUnknownOutcome when the answer was
// lost.
func (s *Session) grantSlot(ctx context.Context, name string, i int, v value, st semState, entry string, rev int64, gone, bury string, guards []clientv3.Cmp) (token int64, sent instant, err error) {
	e := s.eng
	k := SlotKey(name, i)
	path, dir := e.Path(k), e.semDir(name)
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.CreateRevision(path), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(e.tombPath(k)), "=", 0),
		clientv3.Compare(clientv3.CreateRevision(e.queueDir(k)), "=", 0).WithPrefix(),
		clientv3.Compare(clientv3.CreateRevision(e.Path(name)), "<", st.rev+1),
		clientv3.Compare(clientv3.CreateRevision(e.Path(name)+slotInfix), "<", st.rev+1).WithPrefix(),
		clientv3.Compare(clientv3.CreateRevision(gone), "=", 0),
	}
	then := []clientv3.Op{clientv3.OpPut(path, v.encode(), clientv3.WithLease(s.id))}
	if bury != "" {
		then = append(then, clientv3.OpPut(bury, "", clientv3.WithLease(s.id)))
	}
	if entry != "" {
		cmps = append(cmps,
			clientv3.Compare(clientv3.CreateRevision(entry), "=", rev),
			// Every entry's CreateRevision >= rev (clientv3 has no ">="): none older.
			clientv3.Compare(clientv3.CreateRevision(dir), ">", rev-1).WithPrefix())
		then = append(then, clientv3.OpDelete(entry))
	} else {
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(dir), "=", 0).WithPrefix())
	}
	var els []clientv3.Op
	if len(guards) > 0 {
		// Whether the guards held at the same revision tells a guard's
		// failure from the engine's.
		els = []clientv3.Op{clientv3.OpTxn(guards, nil, nil)}
	}
	sent = now()
	tctx, cancel := s.callContext(ctx)
	defer cancel()
	resp, err := s.cli.Txn(tctx).If(append(cmps, guards...)...).Then(then...).Else(els...).Commit()
	switch {
	case err != nil:
		return 0, sent, writeErr(err)
	case resp.Succeeded:
		return resp.Header.Revision, sent, nil
	case len(els) > 0 && !resp.Responses[0].GetResponseTxn().GetSucceeded():
		return 0, sent, ErrGuardFailed
	}
	return 0, sent, nil
}
