package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// batchGrants is the grant lease when it can grant several locks in one transaction
// (*lease.Session).
type batchGrants interface {
	Grants
	GrantBatch(ctx context.Context, reqs []lease.GrantRequest, opts ...lease.LockOption) ([]lease.GrantResult, error)
	Engine() *lease.Engine
}

// grantBatcher puts the grants that reconciles of different locks ask for at the same time
// into one etcd transaction (lease.Session.GrantBatch): each lock keeps its own compares and
// gets its own answer, and the election's IsOwner compare guards the transaction. It runs no
// goroutine of its own: the first caller sends the batch it is in; calls that arrive while a
// batch is in flight queue up, and when it returns, the oldest of them sends the next batch
// (everything queued, up to limit). A batch waits for nothing but the one before it, so a
// lone grant costs what it cost before.
type grantBatcher struct {
	grants batchGrants
	guard  func() clientv3.Cmp
	limit  int

	mu      sync.Mutex
	sending bool         // a batch is in flight; its sender hands over when it returns
	queue   []*grantCall // waiting for the next batch, oldest first
}

// grantCall is one lock's grant waiting for, or in, a batch.
type grantCall struct {
	req    lease.GrantRequest
	done   chan struct{} // closed when token and err are set
	turn   chan struct{} // closed when this call must send the next batch
	leader bool          // turn was closed (under grantBatcher.mu)
	token  int64
	err    error
}

// newGrantBatcher returns a batcher over g, or nil when g cannot batch.
func newGrantBatcher(g Grants, guard func() clientv3.Cmp) *grantBatcher {
	bg, ok := g.(batchGrants)
	if !ok || bg.Engine() == nil {
		return nil
	}
	limit := bg.Engine().MaxGrantBatch(1) // one guard: the election's IsOwner
	if limit < 1 {
		return nil
	}
	return &grantBatcher{grants: bg, guard: guard, limit: limit}
}

// grant grants the lock named key to holder with record, in whichever batch it lands in.
// Its errors are those of lease.Session.Grant: a *lease.HeldError or lease.ErrLocked for
// this lock; lease.ErrGuardFailed, lease.ErrUnknownOutcome or etcd's errors for its whole
// batch. A caller whose ctx ends before its request was sent is withdrawn (ctx's error:
// nothing was sent); once sent, it waits for the answer, which the send's own deadline
// bounds.
func (b *grantBatcher) grant(ctx context.Context, key, holder string, record json.RawMessage) (int64, error) {
	c := &grantCall{req: lease.GrantRequest{Key: key, Holder: holder, Record: record}, done: make(chan struct{}), turn: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, c)
	lead := !b.sending
	if lead {
		b.sending, c.leader = true, true
	}
	b.mu.Unlock()
	if !lead {
		select {
		case <-c.done:
			return c.token, c.err
		case <-c.turn:
		case <-ctx.Done():
			if b.withdraw(c) {
				return 0, fmt.Errorf("grant %s: %w", key, ctx.Err())
			}
			select { // sent, or handed the turn: see it through
			case <-c.done:
				return c.token, c.err
			case <-c.turn:
			}
		}
	}
	b.send(ctx)
	<-c.done // the batch just sent holds c: the queue's oldest call is in the next batch
	return c.token, c.err
}

// withdraw takes c out of the queue if it is still waiting there and has not been handed
// the turn; it reports whether it did.
func (b *grantBatcher) withdraw(c *grantCall) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.leader {
		return false
	}
	for i, q := range b.queue {
		if q == c {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			return true
		}
	}
	return false
}

// send takes the oldest queued calls (up to limit) into one transaction, answers each, and
// hands the turn to the oldest call still queued, if any.
func (b *grantBatcher) send(ctx context.Context) {
	b.mu.Lock()
	n := min(len(b.queue), b.limit)
	batch := append([]*grantCall(nil), b.queue[:n]...)
	b.queue = b.queue[n:]
	b.mu.Unlock()

	reqs := make([]lease.GrantRequest, len(batch))
	for i, c := range batch {
		reqs[i] = c.req
	}
	answered := 0 // calls whose done is closed
	defer func() {
		for _, c := range batch[answered:] { // a panic: the calls learn that much, and the queue moves on
			c.token, c.err = 0, fmt.Errorf("grant %s: %w: the batch's send panicked", c.req.Key, lease.ErrUnknownOutcome)
			close(c.done)
		}
		b.handOver()
	}()
	// The batch is sent for every call in it, so the sender's cancellation does not cut it
	// short; its own deadline bounds it (an answer lost to it is settled by the next turn's
	// read, as for a single grant).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), etcdTimeout)
	results, err := b.grants.GrantBatch(sctx, reqs, lease.WithGuard(b.guard()))
	cancel()
	if err == nil && len(results) != len(batch) {
		err = fmt.Errorf("%w: %d answers for %d grants", lease.ErrUnknownOutcome, len(results), len(batch))
	}
	for i, c := range batch {
		switch {
		case err != nil:
			c.err = fmt.Errorf("grant %s: %w", c.req.Key, err)
		default:
			c.token, c.err = results[i].Token, results[i].Err
		}
		close(c.done)
		answered++
	}
}

// handOver gives the turn to the oldest queued call, or ends the sending.
func (b *grantBatcher) handOver() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.sending = false
		return
	}
	next := b.queue[0]
	next.leader = true
	close(next.turn)
}

// grant grants the lock named key to holder in one guarded etcd transaction, batched with
// the grants of other locks sent at the same time when the grant lease can batch.
// The etcd watch's echo of the grant is not woken for (grantecho.go).
func (r *Reconciler) grant(ctx context.Context, key, holder string, record json.RawMessage) (token int64, err error) {
	r.grantSent(key)
	defer func() { r.grantAnswered(key, token) }()
	if r.batch != nil {
		return r.batch.grant(ctx, key, holder, record)
	}
	return r.Grants.Grant(ctx, key, holder, lease.WithRecord(record), lease.WithGuard(r.Election.IsOwner()))
}
