package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// renewLoop keeps the lease alive with KeepAliveOnce, whose reply is tied to
// the request we sent, so the send time S of every confirmed renewal is
// known. (The client's KeepAlive channel does not say which send a reply
// answers, so it cannot bound validity.) last is the send time of the grant
// or of the renewal that started the session. The loop ends with the
// session, and ends the session when its validity passes or etcd reports the
// lease gone.
func (s *Session) renewLoop(last instant) {
	defer s.wg.Done()
	timer := time.NewTimer(last.Add(s.interval()).Sub(now()))
	defer timer.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-timer.C:
		}
		sent := now()
		if !s.Valid() {
			return
		}
		ttl, err := s.renewOnce(sent)
		switch {
		case err == nil:
			if !s.renewed(sent, ttl) {
				return
			}
			timer.Reset(sent.Add(s.interval()).Sub(now()))
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			s.end(fmt.Errorf("%w: lease %x not found", ErrSessionExpired, int64(s.id)))
			return
		default:
			// Transient (timeout, no leader, connection): try again soon;
			// the validity deadline, not a retry count, decides when to stop.
			timer.Reset(s.retryDelay())
		}
	}
}

// renewOnce sends one KeepAliveOnce. KeepAliveOnce retries internally until
// its context ends, so the call gets a deadline below TTL/3, and never past
// the session's validity: a renewal that has not returned by then is too
// late to matter.
func (s *Session) renewOnce(sent instant) (time.Duration, error) {
	s.mu.Lock()
	left := s.validUntil.Sub(sent)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(s.ctx, min(s.callTimeout(), left))
	defer cancel()
	resp, err := s.cli.KeepAliveOnce(ctx, s.id)
	if err != nil {
		return 0, err
	}
	return time.Duration(resp.TTL) * time.Second, nil
}

// renewed records a renewal sent at sent and confirmed with ttl. It reports
// false, and ends the session, if validity had already passed: a session
// that was invalid, even for a moment, stays ended.
func (s *Session) renewed(sent instant, ttl time.Duration) bool {
	n := now()
	s.mu.Lock()
	ok, p := s.validLocked(n)
	if ok {
		if vu := sent.Add(ttl - s.margin); vu > s.validUntil {
			s.validUntil = vu
		}
	}
	s.mu.Unlock()
	p.run()
	return ok
}
