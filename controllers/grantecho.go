package controllers

import "github.com/lockwarden/lockwarden/pkg/lease"

// The etcd watch of the lock keys (Active.lead) wakes a lock whose key changed. A grant this
// replica has just made and is publishing needs no such turn: the turn that made it goes on
// to its status write (or asks for a retry), and a second turn only reads the key, the cache
// and the clocks again to decide to wait. While 1,000 locks were granted that second turn
// was almost every lock's. So the echo of this replica's own grant (the put that created the
// key at the revision the grant returned as its token) is not woken for. Every other change
// of the key is: a delete, a record update, anyone else's grant, a put at another revision,
// and everything seen while a grant of ours whose answer has not come back is in flight for
// the key (held until it comes back, then woken for unless it is that grant's echo; a grant
// that failed or whose answer was lost wakes for all of them).

// grantEcho is what the watch may show of this replica's grant of one key.
type grantEcho struct {
	inFlight bool               // the grant was sent and has not answered
	token    int64              // the answered grant's token, whose echo is due; 0: none
	held     []lease.LockChange // changes seen while in flight
}

// isEcho reports whether c is the put that created a key at token.
func isEcho(c lease.LockChange, token int64) bool {
	return token > 0 && !c.Deleted && c.Token == token && c.Revision == token
}

// grantSent records a grant of key about to be sent.
func (r *Reconciler) grantSent(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.granted == nil {
		r.granted = map[string]*grantEcho{}
	}
	r.granted[key] = &grantEcho{inFlight: true}
}

// grantAnswered records the answer to the grant of key: token when granted, 0 otherwise. It
// wakes the lock for what was seen meanwhile, but the grant's own echo.
func (r *Reconciler) grantAnswered(key string, token int64) {
	r.mu.Lock()
	e := r.granted[key]
	wake := false
	if e != nil {
		e.inFlight, e.token = false, token
		for _, c := range e.held {
			if isEcho(c, e.token) {
				e.token = 0 // consumed
				continue
			}
			wake = true
		}
		e.held = nil
		if e.token == 0 {
			delete(r.granted, key)
		}
	}
	r.mu.Unlock()
	if wake {
		r.wake(key)
	}
}

// wakeChange queues the lock of an etcd change, unless it is the echo of this replica's own
// grant (which it consumes) or a grant of the key is in flight (then it waits for its answer).
func (r *Reconciler) wakeChange(c lease.LockChange) {
	r.mu.Lock()
	e := r.granted[c.Key]
	switch {
	case e != nil && e.inFlight:
		e.held = append(e.held, c)
		r.mu.Unlock()
		return
	case e != nil && isEcho(c, e.token):
		delete(r.granted, c.Key)
		r.mu.Unlock()
		return
	case e != nil && c.Revision >= e.token:
		delete(r.granted, c.Key) // overtaken by a later change: its echo was seen already
	}
	r.mu.Unlock()
	r.wake(c.Key)
}
