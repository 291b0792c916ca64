package lease

import (
	"context"
	"errors"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// leftover is an etcd key on this session's lease that it gave up on: a lock
// key from a transaction whose answer was lost, the queue entry of a waiter
// that stopped waiting, the key of a released Lock whose delete failed, or a
// queue entry a resumed lease carried. It is this session's to delete, and
// only while it is still what was left (ours): by default while it carries
// exactly the value the call wrote (whose random call ID no other call
// shares); a released Lock's key while it is still that grant; a resumed
// lease's queue entry while it is one created before the resume. Lock keys
// on a resumed lease that no call of this session left (adopted or not) are
// never leftovers.
type leftover struct {
	key   string // lock name (its busy mark, and the Lock that may track it)
	path  string // etcd key
	value string // the encoded value the call wrote
	lock  bool   // a lock key (else a queue entry)
	token int64  // if > 0: the grant (CreateRevision) left, whatever its value
	upTo  int64  // if > 0: any key created at or before this revision
	keep  int64  // if > 0: the grant a Lock of the call holds there (CreateRevision): never a leftover
	// gone, if set, is the etcd key of the call's tombstone (Engine.gonePath),
	// put on the lease before the key is read: a write of the call whose
	// answer was lost may still be on its way, and every write of the call
	// compares the tombstone absent, so once it exists the read sees all that
	// call will ever have written there (semaphore.go).
	gone string
}

// ours reports whether kv, read at lo's path, is still what was left there
// on lease id.
func (lo leftover) ours(kv *mvccpb.KeyValue, id clientv3.LeaseID) bool {
	switch {
	case clientv3.LeaseID(kv.Lease) != id, lo.keep > 0 && kv.CreateRevision == lo.keep:
		return false
	case lo.token > 0:
		return kv.CreateRevision == lo.token
	case lo.upTo > 0:
		return kv.CreateRevision <= lo.upTo
	}
	return string(kv.Value) == lo.value
}

// lockLeftover is the lock key an acquire call with value v may have created.
func (s *Session) lockLeftover(key string, v value) leftover {
	return leftover{key: key, path: s.eng.Path(key), value: v.encode(), lock: true}
}

// settle deletes what a failed call left, once in the caller's goroutine (so
// that in the usual case the keys are gone when the call returns; all of
// them within one call's deadline, TTL/4), then hands what that did not
// settle to the session's clean-up loop, which retries until it is settled
// or the session ends. The caller holds the keys' busy mark (claim), so no
// other call of this session touches them meanwhile. A session that ended
// takes its keys with its lease (or leaves them to whoever resumes it):
// cleaning up through a network that just failed would only delay the
// return.
func (s *Session) settle(ctx context.Context, los ...leftover) {
	if s.Err() != nil || len(los) == 0 {
		return
	}
	cctx, cancel := s.cleanupContext(ctx)
	defer cancel()
	var left []leftover
	for _, lo := range los {
		if cctx.Err() != nil || !s.cleanOne(cctx, lo, true) {
			left = append(left, lo)
		}
	}
	if len(left) == 0 {
		return
	}
	s.handOver(left...)
}

// handOver gives los to the session's clean-up loop and wakes it. Several
// leftovers may share an etcd key (a semaphore's queue entry is one per
// lease, and a second call may leave one before the first's is settled):
// each is kept until it is settled, none replaces another (review 22).
func (s *Session) handOver(los ...leftover) {
	s.mu.Lock()
	if s.err == nil {
		for _, lo := range los {
			if !slices.Contains(s.leftovers[lo.path], lo) {
				s.leftovers[lo.path] = append(s.leftovers[lo.path], lo)
			}
		}
	}
	s.mu.Unlock()
	select {
	case s.cleanc <- struct{}{}:
	default:
	}
}

// cleanLoop retries the session's leftovers every retry delay until none is
// left; settle wakes it. It ends with the session.
func (s *Session) cleanLoop() {
	defer s.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.cleanc:
		case <-timer.C:
		}
		if !s.cleanRound() {
			timer.Reset(s.retryDelay())
		}
	}
}

// cleanRound tries every leftover once; it reports whether none is left.
func (s *Session) cleanRound() bool {
	s.mu.Lock()
	var los []leftover
	for _, at := range s.leftovers {
		los = append(los, at...)
	}
	s.mu.Unlock()
	for _, lo := range los {
		ctx, cancel := context.WithTimeout(s.ctx, s.callTimeout())
		settled := s.cleanOne(ctx, lo, false)
		cancel()
		if settled {
			s.forgetLeftover(lo)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leftovers) == 0
}

// cleanOne deletes lo if it is still there as the call left it; it reports
// whether lo is settled (deleted, gone, or no longer the call's) rather than
// to be tried again (an etcd error, a change in between, or an acquire or
// adopt of the key in flight in this session). It reads the key, then deletes
// it guarded by the CreateRevision and ModRevision it read and this session's
// lease: never a newer grant, never a key written since the read (its value
// may no longer be the call's), never another lease's key. A key a live Lock
// of this session tracks (an Adopt of it: a lock key, a queue entry that
// became the grant, or a released Lock's key) is settled, not deleted. claimed says that the caller
// holds the key's busy mark already.
func (s *Session) cleanOne(ctx context.Context, lo leftover, claimed bool) bool {
	if !claimed {
		// Keep acquires and adopts of the key out while deciding: an adopt
		// could otherwise track the key (a lock key, a queue entry that
		// became the grant, or a released Lock's key whose delete was
		// lost, which the session still holds) between the read and the
		// delete, and the delete would take a grant a live Lock tracks;
		// they wait for the mark (claim), which one read and one delete
		// bound (TTL/4). A key busy with a call of the caller's is left to
		// that call: an acquire that reads a key this session left deletes
		// it itself (cleanNow), so the clean-up never waits for it.
		s.mu.Lock()
		switch {
		case s.err != nil:
			s.mu.Unlock()
			return true
		case s.busy[lo.key]:
			s.mu.Unlock()
			return false
		}
		done := make(chan struct{})
		s.busy[lo.key], s.cleaning[lo.key] = true, done
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.busy, lo.key)
			delete(s.cleaning, lo.key)
			s.mu.Unlock()
			close(done)
		}()
	}
	kvs, err := s.readLeftover(ctx, lo)
	if err != nil {
		return false
	}
	if len(kvs) == 0 {
		return true
	}
	kv := kvs[0]
	if !lo.ours(kv, s.id) {
		return true
	}
	if s.tracks(lo.key, kv.CreateRevision) {
		return true
	}
	del, err := s.cli.Txn(ctx).If(
		clientv3.Compare(clientv3.CreateRevision(lo.path), "=", kv.CreateRevision),
		clientv3.Compare(clientv3.ModRevision(lo.path), "=", kv.ModRevision),
		clientv3.Compare(clientv3.LeaseValue(lo.path), "=", s.id),
	).Then(clientv3.OpDelete(lo.path)).Commit()
	return err == nil && del.Succeeded
}

// readLeftover reads lo's key; with a tombstone to put first (lo.gone), it
// puts it in the same transaction, before the read.
func (s *Session) readLeftover(ctx context.Context, lo leftover) ([]*mvccpb.KeyValue, error) {
	if lo.gone == "" {
		resp, err := s.cli.Get(ctx, lo.path)
		if err != nil {
			return nil, err
		}
		return resp.Kvs, nil
	}
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpPut(lo.gone, "", clientv3.WithLease(s.id)),
		clientv3.OpGet(lo.path),
	).Commit()
	if err != nil {
		return nil, err
	}
	return resp.Responses[1].GetResponseRange().Kvs, nil
}

// forgetLeftover drops lo from the clean-up loop's list.
func (s *Session) forgetLeftover(lo leftover) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := slices.DeleteFunc(s.leftovers[lo.path], func(x leftover) bool { return x == lo })
	if len(at) == 0 {
		delete(s.leftovers, lo.path)
		return
	}
	s.leftovers[lo.path] = at
}

// cleanNow settles the leftovers at path, if any, in the caller's goroutine;
// the caller holds their key's busy mark. It reports whether none is left at
// path.
func (s *Session) cleanNow(ctx context.Context, path string) bool {
	s.mu.Lock()
	los := slices.Clone(s.leftovers[path])
	s.mu.Unlock()
	if len(los) == 0 {
		return true
	}
	cctx, cancel := s.cleanupContext(ctx)
	defer cancel()
	clean := true
	for _, lo := range los {
		if !s.cleanOne(cctx, lo, true) {
			clean = false
			continue
		}
		s.forgetLeftover(lo)
	}
	return clean
}

// leftoverAt reports whether the session is cleaning up path.
func (s *Session) leftoverAt(path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leftovers[path]) > 0
}

// abandon deletes, once and at once, what a call of a session that just
// expired left: its queue entry may be the lock's grant by now (owner.go),
// and etcd may not have ended the lease yet (the session's validity ends
// before etcd's expiry), so without this the lock would wait for the lease.
// The delete is guarded as every clean-up is (cleanOne); if it fails, the
// lease takes the keys. A closed or orphaned session does nothing here: a
// closed one revokes its lease, an orphaned one leaves its keys to whoever
// resumes it.
func (s *Session) abandon(los ...leftover) {
	if err := s.Err(); len(los) == 0 || !errors.Is(err, ErrSessionExpired) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.callTimeout())
	defer cancel()
	for _, lo := range los {
		s.cleanOne(ctx, lo, true)
	}
}
