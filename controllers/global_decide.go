package controllers

import (
	"time"

	"github.com/lockwarden/lockwarden/pkg/clock"
)

// The manager side of a global lock (spec.scope Global, issue 21; the rule and its proof:
// docs/global.md): when a manager may write the next round, renew the global grant's lease,
// and grant a lock the other cluster held. Pure functions of what this process observed, on
// its own clock; nothing that runs calls them yet. The wiring gathers these inputs and puts
// the compares they return into the etcd transactions.

// roundInput is what a manager knows when it considers writing round next of a global lock.
type roundInput struct {
	// seen: this process has positive evidence that round seenRound is committed on the
	// lock object: the acknowledgement of its own status write, or a read (cached or not)
	// showing it. An ambiguous write (a timeout, a lost reply) is no evidence. seenAt is when
	// this process received that evidence (its clock). seenRound 0 with seen: the object was
	// read with no round yet.
	seen      bool
	seenRound int64
	seenAt    clock.Instant
	// confirm is this process's newest linearizable confirmation of the grant that the
	// round vouches for: a transaction comparing the key's CreateRevision with the token and
	// the election's IsOwner (publishing a grant: the grant's own transaction).
	confirm confirmation
	// next is the round to write and token the grant it vouches for. A token is the grant
	// key's CreateRevision, always > 0.
	next  int64
	token int64
}

// confirmation is one linearizable confirmation of a grant.
type confirmation struct {
	// sent is this process's clock before the transaction was sent.
	sent clock.Instant
	// done: the reply arrived; held: its compares held (the key's CreateRevision was
	// token and the election's key was this process's).
	done, held bool
	token      int64
}

// roundVerdict is what mayWriteRound decides.
type roundVerdict int

const (
	// roundWrite: write round next now (a status update with the resourceVersion the
	// evidence of round next-1 carried).
	roundWrite roundVerdict = iota
	// roundObserve: no evidence that round next-1 is committed: read the lock first.
	roundObserve
	// roundConfirm: no confirmation of token sent after round next-1 was seen: confirm again.
	roundConfirm
	// roundLost: the newest confirmation, sent after round next-1 was seen, failed: the grant
	// is gone or the election lost. Write no round; the term ends by the term-ending rules.
	roundLost
	// roundNotNext: next is not one above the round seen (the CRD's rule refuses it anyway).
	roundNotNext
	// roundNoToken: the round would vouch for token 0 (or below). No grant has it: etcd's
	// compare CreateRevision(K) == 0 holds exactly when K is absent, so a "confirmation" of
	// token 0 that held proves the grant gone. Bad input: write nothing.
	roundNoToken
)

// String names the verdict for logs and test messages.
func (v roundVerdict) String() string {
	return [...]string{"write", "observe", "confirm", "lost", "not next", "no token"}[v]
}

// mayWriteRound decides whether this manager may write round in.next now. It may only after
// a confirmation of the grant, sent after it saw round next-1 committed, held. That is what
// makes a late-landing write harmless: a write of round r+1 sent long ago and landing now
// still followed a confirmation later than round r's commit, and any write after it (r+2)
// needs a new confirmation sent after r+1 was seen, which fails once the grant is gone.
func mayWriteRound(in roundInput) roundVerdict {
	switch {
	case in.token <= 0:
		return roundNoToken
	case !in.seen:
		return roundObserve
	case in.next != in.seenRound+1:
		return roundNotNext
	case in.confirm.token != in.token || in.confirm.sent <= in.seenAt || !in.confirm.done:
		return roundConfirm
	case !in.confirm.held:
		return roundLost
	}
	return roundWrite
}

// renewInput is what a manager knows when the global grant's lease is due for a keepalive.
type renewInput struct {
	now clock.Instant
	// owner: this process's election is valid now (its session's deadline is ahead).
	owner bool
	// apiReachable: this process's API server answered a request sent within the last
	// round period. A manager cut off from its API server, whose rounds cannot land, must let
	// the grant expire so that the other cluster can take over.
	apiReachable bool
	// acked: a round write of this lock was acknowledged; ackSent is when the newest
	// acknowledged one was sent, ackAt when its acknowledgement arrived.
	acked          bool
	ackSent, ackAt clock.Instant
	// renewed: a keepalive was sent before; renewSent is when the newest one was sent.
	renewed   bool
	renewSent clock.Instant
	// period is P, the round cadence.
	period time.Duration
}

// renewVerdict is what mayRenewGrant decides.
type renewVerdict int

const (
	// renewNow: send the keepalive.
	renewNow renewVerdict = iota
	// renewNotOwner: the election is not valid.
	renewNotOwner
	// renewCutOff: the API server does not answer.
	renewCutOff
	// renewNoRound: no round write sent since the previous keepalive was acknowledged.
	renewNoRound
	// renewStaleAck: the newest acknowledgement is older than one round period.
	renewStaleAck
)

// String names the verdict for logs and test messages.
func (v renewVerdict) String() string {
	return [...]string{"renew", "not owner", "cut off from the API server", "no round acknowledged since the last renewal", "acknowledgement older than a round"}[v]
}

// mayRenewGrant decides whether this manager may send a keepalive of a global grant's lease
// now: only while it owns the election, its API server answers, and a round write sent after
// the previous keepalive was acknowledged within the last round period. So each keepalive
// follows a round that landed, and a cut from the API server at time c stops them by c + P:
// the grant then expires within P + G of the cut (docs/global.md, "Failover").
func mayRenewGrant(in renewInput) renewVerdict {
	switch {
	case !in.owner:
		return renewNotOwner
	case !in.apiReachable:
		return renewCutOff
	case !in.acked || (in.renewed && in.ackSent <= in.renewSent):
		return renewNoRound
	case in.now.Sub(in.ackAt) > in.period:
		return renewStaleAck
	}
	return renewNow
}
