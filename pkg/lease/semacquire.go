package lease

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxSlotTries bounds TryAcquireSlot's rounds of read and grant: each round
// that fails its compares means that another caller took a slot or queued
// meanwhile (a holder's Update fails no grant), so while slots stay free and
// nobody queues it tries again, up to twice as many rounds as a semaphore has
// slots (review 22: 4 rounds refused callers while slots were free).
const maxSlotTries = 2*MaxSlots + 4

// semCall is one AcquireSlot or TryAcquireSlot call.
type semCall struct {
	s      *Session
	name   string
	n      int
	v      value
	guards []clientv3.Cmp
	entry  string // the call's queue entry (its etcd key)
	evalue string // the entry's value
	gone   string // the call's tombstone (its etcd key; semaphore.go)
	// lost counts the call's writes whose answer was lost: each may still
	// land, until the call's tombstone exists.
	lost   int
	rev    int64 // the entry's CreateRevision, 0 while not queued
	queued bool  // the call has (or may have) written its entry
	// unsure holds, by slot, the send time of the first grant of that slot
	// whose answer was lost: the slot key may exist with the call's value.
	unsure map[int]instant
	marked map[int]bool // slots whose key's busy mark the call holds
}

// acquireSlot is AcquireSlot (wait) and TryAcquireSlot.
func (s *Session) acquireSlot(ctx context.Context, name, holder string, n int, opts []LockOption, wait bool) (l *SlotLock, err error) {
	if err := validateSemaphore(name, n); err != nil {
		return nil, err
	}
	if err := validateHolder(holder); err != nil {
		return nil, err
	}
	// A slot's grant fits fewer guards than lockConfig allows: its own check
	// comes instead, and says how many fit.
	cfg, err := applyLockOptions(opts)
	if err != nil {
		return nil, err
	}
	if err := checkSlotGuards(len(cfg.guards), wait, s.eng.maxTxnOps); err != nil {
		return nil, err
	}
	if r := semReadOps(n); r > s.eng.maxTxnOps {
		return nil, invalidf("reading %d slots takes %d operations, above the %d per transaction", n, r, s.eng.maxTxnOps)
	}
	if err := s.claim(ctx, semMark(name)); err != nil {
		if !wait && errors.Is(err, ErrBusy) {
			// another call of this session waits for (or is taking) a slot: for
			// TryAcquireSlot that is a queued waiter, so the semaphore is locked to it
			// (review 22: it said ErrBusy)
			return nil, fmt.Errorf("%w: another call of this session waits for semaphore %s", ErrLocked, name)
		}
		return nil, err
	}
	defer s.unclaim(semMark(name))
	ctx, cancel := s.bind(ctx)
	defer cancel()
	call := newCallID()
	c := &semCall{
		s: s, name: name, n: n, guards: cfg.guards,
		v:      value{Holder: holder, Record: cfg.record, Call: call, Slots: n},
		entry:  s.eng.semPath(name, s.id),
		gone:   s.eng.gonePath(call),
		unsure: make(map[int]instant),
		marked: make(map[int]bool),
	}
	c.evalue = value{Holder: holder, Call: c.v.Call, Slots: n}.encode()
	defer func() {
		for i := range c.marked {
			s.unclaim(SlotKey(name, i))
		}
	}()
	defer func() {
		if err == nil {
			return
		}
		// What this call may have left is the session's to delete (settle
		// retries it); a session that ended takes it with its lease. After a
		// lost answer the clean-up puts the call's tombstone before it reads,
		// so that the write, if it lands later, fails.
		var los []leftover
		if c.queued {
			los = append(los, leftover{key: semMark(name), path: c.entry, value: c.evalue})
		}
		for i := range c.unsure {
			los = append(los, s.lockLeftover(SlotKey(name, i), c.v))
		}
		if c.lost > 0 {
			for i := range los {
				los[i].gone = c.gone
			}
		}
		s.settle(ctx, los...)
		s.abandon(los...)
	}()
	if !wait {
		return c.try(ctx)
	}
	return c.wait(ctx)
}

// try is TryAcquireSlot: a few rounds of read and grant, without queuing.
func (c *semCall) try(ctx context.Context) (*SlotLock, error) {
	for range maxSlotTries {
		st, err := c.s.readSem(ctx, c.name, c.n, "", 0)
		if err != nil {
			return nil, err
		}
		if err := st.mismatch(c.name, c.n); err != nil {
			return nil, err
		}
		if st.waiters > 0 {
			return nil, fmt.Errorf("%w: %d waiters queued for the semaphore's %d slots", ErrLocked, st.waiters, c.n)
		}
		i := st.freeSlot()
		if i < 0 {
			return nil, fmt.Errorf("%w: all %d slots held", ErrLocked, c.n)
		}
		if l, err := c.grant(ctx, i, st); l != nil || err != nil {
			return l, err
		}
	}
	return nil, fmt.Errorf("%w: the semaphore's slots changed in every one of %d tries", ErrLocked, maxSlotTries)
}

// grant sends the grant of slot i from the read st and registers its Lock.
// It returns neither a Lock nor an error when the engine's compares failed
// or another call of this session is busy with the slot's key.
func (c *semCall) grant(ctx context.Context, i int, st semState) (*SlotLock, error) {
	s := c.s
	if err := c.mark(ctx, i); errors.Is(err, ErrBusy) {
		s.backoff(ctx)
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	entry := ""
	if c.rev > 0 {
		entry = c.entry
	}
	// After a lost answer the grant also puts the call's tombstone, so that
	// the lost write, should it land later, fails (semaphore.go).
	gone := ""
	if c.lost > 0 {
		gone = c.gone
	}
	token, sent, err := s.grantSlot(ctx, c.name, i, c.v, st, entry, c.rev, c.gone, gone, c.guards)
	switch {
	case errors.Is(err, ErrUnknownOutcome):
		c.lost++
		if _, ok := c.unsure[i]; !ok {
			// Keep the slot's busy mark until the call ends: the key may
			// be ours, and it is settled then (taken or deleted).
			c.unsure[i] = sent
		}
		return nil, err
	case err != nil || token == 0:
		c.unmark(i)
		return nil, err
	}
	if entry != "" {
		c.queued = false // the grant deleted the entry
	}
	return c.register(i, token, sent, token+1)
}

// mark takes the busy mark of slot i's key for this call (Session.claim),
// unless the call holds it already.
func (c *semCall) mark(ctx context.Context, i int) error {
	if c.marked[i] {
		return nil
	}
	if err := c.s.claim(ctx, SlotKey(c.name, i)); err != nil {
		return err
	}
	c.marked[i] = true
	return nil
}

// unmark gives back slot i's busy mark, unless a lost answer left the slot
// unsure: that mark is kept until the call ends.
func (c *semCall) unmark(i int) {
	if _, ok := c.unsure[i]; ok || !c.marked[i] {
		return
	}
	c.s.unclaim(SlotKey(c.name, i))
	delete(c.marked, i)
}

// register starts tracking slot i's grant at token, confirmed by a
// transaction sent at sent. On success nothing of the call is left unsure: a
// lost grant that applied would have made this one's compares fail, and a
// lost write that lands later fails its compares on the call's tombstone,
// which the grant put (or the caller did) when an answer was lost.
func (c *semCall) register(i int, token int64, sent instant, fromRev int64) (*SlotLock, error) {
	s, k := c.s, SlotKey(c.name, i)
	l := s.newLock(k, s.eng.Path(k), token, c.v)
	if err := s.register(l, sent, fromRev); err != nil {
		c.unsure[i] = sent // the caller's clean-up deletes the key
		return nil, err
	}
	clear(c.unsure)
	return &SlotLock{Lock: l, semaphore: c.name, index: i, slots: c.n}, nil
}

// wait is AcquireSlot: take a free slot at once if nobody queues, else queue
// and take one when the entry is the oldest and a slot is free.
func (c *semCall) wait(ctx context.Context) (*SlotLock, error) {
	s := c.s
	var seen instant // unused: a slot's validity counts from its grant's send
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if c.queued && c.rev == 0 {
			if err := c.enqueue(ctx); err != nil {
				if !unknownOutcome(err) && !overloaded(err) {
					return nil, err
				}
				s.backoff(ctx)
				continue
			}
		}
		st, err := s.readSem(ctx, c.name, c.n, c.entryIfQueued(), c.rev)
		if err != nil {
			if !unknownOutcome(err) && !overloaded(err) {
				return nil, err
			}
			s.backoff(ctx)
			continue
		}
		if i := st.mine(c.v.encode(), int64(s.id)); i >= 0 {
			if sent, ok := c.unsure[i]; ok {
				// A grant whose answer was lost applied: the key is ours
				// since before that transaction was sent.
				if c.lost > 1 {
					// Another lost write may still land: the tombstone first.
					if err := c.bury(ctx); err != nil {
						return nil, err
					}
				}
				c.queued = false // that grant deleted the entry
				return c.register(i, st.slots[i].lock.CreateRevision, sent, st.slots[i].lock.ModRevision+1)
			}
		}
		if err := st.mismatch(c.name, c.n); err != nil {
			return nil, err
		}
		switch {
		case !c.queued && st.waiters == 0 && st.freeSlot() >= 0:
			// Nobody queues and a slot is free: take it as TryAcquireSlot
			// does; if that fails, read again (and queue if need be).
			l, err := c.grant(ctx, st.freeSlot(), st)
			if l != nil || !retryable(err) {
				return l, err
			}
			if err != nil {
				s.backoff(ctx)
			}
			continue
		case !c.queued:
			c.queued = true
			continue
		case st.lost:
			// Our entry is gone (an operator deleted it): queue at the back.
			c.rev = 0
			continue
		case st.pred != nil:
			if changed, _, err := s.waitGone(ctx, st.rev, &seen, st.pred); err != nil {
				return nil, err
			} else if !changed {
				s.backoff(ctx)
			}
			continue
		}
		if i := st.freeSlot(); i >= 0 {
			l, err := c.grant(ctx, i, st)
			if l != nil || !retryable(err) {
				return l, err
			}
			if err != nil {
				s.backoff(ctx)
			}
			continue
		}
		if changed, _, err := s.waitGone(ctx, st.rev, &seen, st.blockers()...); err != nil {
			return nil, err
		} else if !changed {
			s.backoff(ctx)
		}
	}
}

// retryable reports whether a grant's error leaves the wait going: nil (its
// compares failed), a lost answer, or etcd's "too many requests".
func retryable(err error) bool {
	return err == nil || errors.Is(err, ErrUnknownOutcome) || overloaded(err)
}

// entryIfQueued returns the entry's key once it is queued, else "".
func (c *semCall) entryIfQueued() string {
	if c.rev > 0 {
		return c.entry
	}
	return ""
}

// enqueue puts the call's entry at the back of the semaphore's queue,
// unless the call's tombstone exists. An entry this call put in an earlier,
// interrupted try keeps its place; one another call of this session left
// (one entry per lease, and one AcquireSlot per semaphore and session at a
// time) is deleted first, guarded by its CreateRevision, whether or not the
// session's clean-up knows of it: an entry is never a grant, and this call
// must not take its place ahead of waiters that came after it (review 22).
func (c *semCall) enqueue(ctx context.Context) error {
	s := c.s
	for range 3 {
		tctx, cancel := s.callContext(ctx)
		resp, err := s.cli.Txn(tctx).
			If(clientv3.Compare(clientv3.CreateRevision(c.entry), "=", 0),
				clientv3.Compare(clientv3.CreateRevision(c.gone), "=", 0)).
			Then(clientv3.OpPut(c.entry, c.evalue, clientv3.WithLease(s.id))).
			Else(clientv3.OpGet(c.entry)).
			Commit()
		cancel()
		if err != nil {
			if unknownOutcome(err) {
				c.lost++
			}
			return fmt.Errorf("enqueue: %w", err)
		}
		if resp.Succeeded {
			c.rev = resp.Header.Revision
			return nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			// Only the call's own clean-up puts its tombstone, after the call.
			return fmt.Errorf("enqueue: %w: the call's tombstone %s exists", ErrInvalid, c.gone)
		}
		kv := kvs[0]
		if string(kv.Value) == c.evalue {
			c.rev = kv.CreateRevision
			return nil
		}
		_, err = s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(c.entry), "=", kv.CreateRevision)).
			Then(clientv3.OpDelete(c.entry)).
			Commit()
		if err != nil {
			return fmt.Errorf("delete stale queue entry: %w", err)
		}
	}
	return fmt.Errorf("enqueue: %w: a stale queue entry of this lease keeps coming back", ErrLocked)
}

// bury puts the call's tombstone on the session's lease: from then on no
// write of the call applies (they all compare it absent).
func (c *semCall) bury(ctx context.Context) error {
	tctx, cancel := c.s.callContext(ctx)
	defer cancel()
	if _, err := c.s.cli.Put(tctx, c.gone, "", clientv3.WithLease(c.s.id)); err != nil {
		return fmt.Errorf("put the call's tombstone: %w", err)
	}
	return nil
}
