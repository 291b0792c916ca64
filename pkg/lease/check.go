package lease

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// errKeyGone is the cause when a held key was deleted or replaced.
var errKeyGone = fmt.Errorf("%w: key deleted or replaced", ErrNotHeld)

// checkLoop re-checks every held key of the session every TTL/3 with
// linearizable transactions, batched so that one transaction carries at
// most the engine's max txn ops compares. A confirmed check sent at S makes
// the lock valid until S + TTL - margin (and no longer than its session); a
// key found deleted or replaced ends its lock at once. The loop ends with
// the session.
func (s *Session) checkLoop() {
	defer s.wg.Done()
	timer := time.NewTimer(s.interval())
	defer timer.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-timer.C:
		case <-s.checkc:
		}
		started := now()
		next := s.interval()
		if !s.checkOwnership() {
			next = s.retryDelay()
		}
		timer.Reset(started.Add(next).Sub(now()))
	}
}

// requestCheck asks the check loop for a round now (after a watch failed,
// for example), without blocking.
func (s *Session) requestCheck() {
	select {
	case s.checkc <- struct{}{}:
	default:
	}
}

// heldLocks returns the session's held locks, ordered by key.
func (s *Session) heldLocks() []*Lock {
	s.mu.Lock()
	locks := make([]*Lock, 0, len(s.locks))
	for _, l := range s.locks {
		locks = append(locks, l)
	}
	s.mu.Unlock()
	slices.SortFunc(locks, func(a, b *Lock) int { return strings.Compare(a.key, b.key) })
	return locks
}

// checkOwnership checks every held lock once; it reports whether every
// batch got an answer from etcd.
func (s *Session) checkOwnership() bool {
	locks := s.heldLocks()
	ok := true
	for len(locks) > 0 {
		n := min(len(locks), s.eng.maxTxnOps)
		if !s.checkBatch(locks[:n]) {
			ok = false
		}
		locks = locks[n:]
	}
	return ok
}

// checkBatch runs one transaction: If(CreateRevision(key) == token for each
// lock) Then() Else(Get each key). When every compare holds the answer is
// small; otherwise the Else reads say which keys are no longer ours. Both
// branches are reads, so etcd serves the transaction linearizably.
func (s *Session) checkBatch(locks []*Lock) bool {
	cmps := make([]clientv3.Cmp, len(locks))
	gets := make([]clientv3.Op, len(locks))
	for i, l := range locks {
		cmps[i] = l.IsOwner()
		gets[i] = clientv3.OpGet(l.path, clientv3.WithKeysOnly())
	}
	sent := now()
	ctx, cancel := context.WithTimeout(s.ctx, s.callTimeout())
	resp, err := s.cli.Txn(ctx).If(cmps...).Else(gets...).Commit()
	cancel()
	if err != nil {
		return false
	}
	for i, l := range locks {
		if resp.Succeeded {
			l.confirmed(sent)
			continue
		}
		kvs := resp.Responses[i].GetResponseRange().Kvs
		if len(kvs) == 1 && kvs[0].CreateRevision == l.token {
			l.confirmed(sent)
		} else {
			l.lose(errKeyGone)
		}
	}
	return true
}
