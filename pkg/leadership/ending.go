package leadership

import (
	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// A program that learns how its work stops from outside the elector (lockwarden-agent's
// sidecar: the workload runs in another container) needs to know why the controller is ending
// this pod's term: a Releasing term whose reason is HolderTerminating means the controller saw
// the pod's deletion. Ending says so from the newest accepted observation.

// ending is what the newest accepted observation says about a term that is ending.
type ending struct {
	uid    string
	token  int64
	reason string
}

// Ending reports whether the newest accepted observation (a consistent read or a watch event)
// shows the lock naming this pod with token in phase Releasing, and with what reason the
// controller recorded on that term (status.history; lockv1.ReasonHolderTerminating when it saw
// the pod's deletion, "" when it recorded none). It is false for any other observation:
// Held, another holder or token, no lock, nothing observed yet. Like GetLeader it may come
// from a watch event no read has confirmed: it tells why a term ends, never that one is led.
// Safe for concurrent use; after Run returns it keeps the last observation.
func (e *Elector) Ending(token int64) (reason string, ok bool) {
	v := e.ending.Load()
	if v == nil || token <= 0 || v.token != token || v.uid != string(e.cfg.Identity) {
		return "", false
	}
	return v.reason, true
}

// setEnding records the status of the newest accepted observation (nil: no lock).
func (e *Elector) setEnding(st *lockv1.DistributedLockStatus) {
	if st == nil || st.Phase != lockv1.PhaseReleasing || st.HolderUID == "" {
		e.ending.Store(nil)
		return
	}
	e.ending.Store(&ending{uid: string(st.HolderUID), token: st.FencingToken, reason: openReason(st)})
}

// openReason is the reason recorded on the published term's history entry, "" when there is
// none: the newest entry, still open, of the published token.
func openReason(st *lockv1.DistributedLockStatus) string {
	if len(st.History) > 0 && st.History[0].Ended == nil && st.History[0].Token == st.FencingToken {
		return st.History[0].Reason
	}
	return ""
}
