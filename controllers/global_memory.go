package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/lockwarden/lockwarden/pkg/clock"
)

// globalMemory holds what this process observed of each Global lock itself, on its own
// monotonic clock (pkg/clock). Nothing here survives a restart or an election change (a new
// Active.lead builds a new GlobalReconciler): a new process has seen nothing, so it confirms
// before its first round, waits the full delay before any takeover, and never succeeds a
// grant by R8, whose acknowledged delete only this memory can show (docs/global.md, F1).
type globalMemory struct {
	mu    sync.Mutex
	locks map[string]*globalObject
}

// globalObject is one Global lock object's memory (keyed by lock key, reset when the UID
// changes: a lock deleted and created again starts afresh).
type globalObject struct {
	uid types.UID
	// seen, seenRound, seenAt: the newest positive evidence of a committed round (a read of
	// the lock, or the acknowledgement of this process's own write), and when it arrived.
	seen      bool
	seenRound int64
	seenAt    clock.Instant
	// confirm is the newest linearizable confirmation of the grant (a Confirm, or the grant's
	// own transaction: R2).
	confirm confirmation
	// roundToken, roundsForToken, roundSent: the token of this process's round writes, how
	// many it had acknowledged for that token, and when the newest was sent (the cadence is
	// send-timed: docs/global.md, L1).
	roundToken     int64
	roundsForToken int
	roundSent      clock.Instant
	roundWritten   bool
	// acked, ackSent, ackAt: the newest acknowledged round write (mayRenewGrant).
	acked          bool
	ackSent, ackAt clock.Instant
	// renewed, renewSent: the newest keepalive of the grant's lease.
	renewed   bool
	renewSent clock.Instant
	// tomb is this process's waiting record (R7.2); rivalMod and rivalSince: another
	// manager's waiting record (by T's ModRevision) and when this process first saw it.
	tomb       tombstoneWrite
	rivalMod   int64
	rivalSince clock.Instant
	// freeMod and freeAt: the grant was first seen free with T at ModRevision freeMod (0:
	// never written) at freeAt (spec.clusterPreference counts from it); 0 while K is held.
	freeMod int64
	freeAt  clock.Instant
	// deletedToken: this process's guarded Delete of its own grant with this token was
	// acknowledged (R8's condition; 0: none).
	deletedToken int64
	// releasingToken, releasingAt: the token whose term this process published Releasing, and
	// when that write's acknowledgement arrived (the delay counts from it).
	releasingToken  int64
	releasingAt     clock.Instant
	releasingReason string
	// deletingSince: on a manager without --cluster-name, the reception of this process's
	// first uncached read of the deleted lock (its delay counts from it); 0: none yet.
	deletingSince clock.Instant
}

func newGlobalMemory() *globalMemory { return &globalMemory{locks: map[string]*globalObject{}} }

// get returns a copy of the object's memory (zero for a new UID).
func (m *globalMemory) get(key string, uid types.UID) (o globalObject) {
	m.update(key, uid, func(cur *globalObject) { o = *cur })
	return o
}

// update applies f to the object's memory under the lock (a new UID starts from zero).
func (m *globalMemory) update(key string, uid types.UID, f func(o *globalObject)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if o := m.locks[key]; o != nil && o.uid == uid {
		f(o)
		return
	}
	o := &globalObject{uid: uid}
	m.locks[key] = o
	f(o)
}

// forget drops a deleted lock's memory.
func (m *globalMemory) forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.locks, key)
}

// saw records positive evidence that round is committed, received at at. Evidence of an
// older round than one already seen is ignored: rounds only grow on one object.
func (o *globalObject) saw(round int64, at clock.Instant) {
	if o.seen && round < o.seenRound {
		return
	}
	o.seen, o.seenRound, o.seenAt = true, round, at
}

// roundAcked records the acknowledgement, at at, of this process's round write for token
// sent at sent.
func (o *globalObject) roundAcked(token int64, sent, at clock.Instant) {
	if o.roundToken != token {
		o.roundToken, o.roundsForToken = token, 0
	}
	o.roundsForToken++
	o.acked, o.ackSent, o.ackAt = true, sent, at
}

// newGrant forgets what belonged to earlier grants once this process's grant with token is
// known: its own transaction is the first confirmation (R2), no wait or delete stands.
func (o *globalObject) newGrant(token int64, sent clock.Instant) {
	o.confirm = confirmation{sent: sent, done: true, held: true, token: token}
	o.tomb, o.deletedToken = tombstoneWrite{}, 0
	o.releasingToken, o.releasingAt, o.releasingReason = 0, 0, ""
	o.roundToken, o.roundsForToken, o.roundWritten = token, 0, false
	o.acked, o.renewed = false, false
}
