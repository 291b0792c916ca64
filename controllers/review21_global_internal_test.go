package controllers

import (
	"testing"
	"time"
)

// Adversarial review of the global lock's manager-side decisions (issue 21, docs/global.md):
// rows where mayWriteRound and decideTakeover answer what the rule does not allow, and rows
// that pin timelines the review checked and found sound. ts and gTok are
// global_decide_internal_test.go's.

// TestReview21ConfirmationOfTokenZero: etcd's compare CreateRevision(K) == 0 is its test for
// K being ABSENT. A "confirmation" of token 0 that held therefore proves the grant is gone,
// yet mayWriteRound lets the manager write a round vouching for it (and mayRenewGrant then
// renews on that round's acknowledgement). A grant's token is a revision, always > 0: a
// round for token 0 (a wiring that lost the token, a zero-valued field) must be refused, not
// written. Pod-side globalDeadline refuses token 0, so this is no two-holder execution today;
// it is a confirmation that confirms the opposite of what R1 needs.
func TestReview21ConfirmationOfTokenZero(t *testing.T) {
	in := roundInput{
		seen: true, seenRound: 7, seenAt: ts(10),
		confirm: confirmation{sent: ts(11), done: true, held: true, token: 0},
		next:    8, token: 0,
	}
	if got := mayWriteRound(in); got == roundWrite {
		t.Errorf("mayWriteRound(token 0) = %v: a held compare CreateRevision(K) == 0 shows K absent, it confirms no grant", got)
	}
}

// TestReview21HeldWaitingRecordAtOrBelowItsBasis: a waiting record's transaction commits
// after the observation it compares against (ModRevision(T) <= v), so a held record has a
// revision w > v. decideTakeover takes any w: with w = 0 (a reply parsed wrong, an unset
// field) it answers takeGrant comparing ModRevision(T) == 0, which etcd evaluates as "T
// absent" and which passes once T is gone, whatever waited or granted since. Bad input must
// give a restart, not a grant under a compare that proves nothing.
func TestReview21HeldWaitingRecordAtOrBelowItsBasis(t *testing.T) {
	d := 30 * time.Second
	for _, rev := range []int64{0, 499, 500} {
		in := takeoverInput{
			now: ts(131), ownDelay: d,
			gone: true, goneRev: 500, goneAt: ts(100), goneDelay: d,
			tomb: tombstoneWrite{sent: true, basis: 500, answered: true, held: true, rev: rev},
		}
		if got := decideTakeover(in); got.verb == takeGrant {
			t.Errorf("decideTakeover(held waiting record at revision %d, basis 500) = %+v: a held record commits above its basis; want a restart", rev, got)
		}
	}
}

// TestReview21NewerObservationKeepsTheWait (liveness). B observed the grant gone at revision
// 500 (received at 100 s), its waiting record committed at 502. At 125 s B receives a newer
// read (a watch re-established after a reset, a periodic resync) showing K still absent at
// revision 610 and T still at 502: B's own record, nothing changed. R7.3 grants at
// R + D_w = 130 s. decideTakeover answers takeTombstone for basis 610: a new waiting record,
// which voids the standing wait and restarts it from 125 s. A manager whose etcd watch
// resets more often than D_w (a cross-region link) never grants: the takeover never happens.
// A newer observation that shows the own record unchanged must leave the wait standing
// (decideTakeover then needs the basis observation's reception time in tombstoneWrite).
func TestReview21NewerObservationKeepsTheWait(t *testing.T) {
	d := 30 * time.Second
	in := takeoverInput{
		now: ts(131), ownDelay: d,
		gone: true, goneRev: 610, goneAt: ts(125), goneDelay: d,
		tomb:    tombstoneWrite{sent: true, basis: 500, answered: true, held: true, rev: 502},
		tombMod: 502,
	}
	if got := decideTakeover(in); got.verb == takeTombstone || got.verb == takeRestart {
		t.Errorf("decideTakeover(newer observation, own waiting record 502 unchanged) = %+v: voids a standing wait; R7.3 grants at 130 s", got)
	}
}

// TestReview21TakeoverTimelinesSound pins timelines the review checked against the proof
// (Lemma 4, the induction's R7 case) and found sound.
func TestReview21TakeoverTimelinesSound(t *testing.T) {
	d := 30 * time.Second
	tests := []struct {
		name string
		in   takeoverInput
		want takeover
	}{
		{
			// C observed K gone at 500 (received at 100 s) with B's waiting record in T; B is
			// paused. C yields 2 D_w, then overwrites. Its wait counts from 100 s, so it may
			// grant as soon as its own record is acknowledged: every confirmation of every
			// earlier token was linearized before 100 s (Lemma 4), and B's late grant compares
			// its own record and fails.
			name: "yield 2 D_w, overwrite: the wait from the first reception has run out",
			in: takeoverInput{
				now: ts(161), ownDelay: d, gone: true, goneRev: 500, goneAt: ts(100), goneDelay: d,
				rival: true, rivalSince: ts(100),
			},
			want: takeover{verb: takeTombstone, basis: 500},
		},
		{
			name: "after the overwrite's acknowledgement: grant at once",
			in: takeoverInput{
				now: ts(161.2), ownDelay: d, gone: true, goneRev: 500, goneAt: ts(100), goneDelay: d,
				rival: true, rivalSince: ts(100),
				tomb: tombstoneWrite{sent: true, basis: 500, answered: true, held: true, rev: 700},
			},
			want: takeover{verb: takeGrant, tombRev: 700},
		},
		{
			// Different delays: A's grant record carried 60 s (A's D), B's own is 20 s. B
			// waits 60 s from its reception, not 20 s (C3).
			name: "the longer carried delay governs the wait",
			in: takeoverInput{
				now: ts(150), ownDelay: 20 * time.Second, gone: true, goneRev: 500, goneAt: ts(100), goneDelay: 60 * time.Second,
				tomb: tombstoneWrite{sent: true, basis: 500, answered: true, held: true, rev: 501},
			},
			want: takeover{verb: takeWait, wait: 10 * time.Second},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := decideTakeover(tt.in); got != tt.want {
				t.Errorf("decideTakeover(%+v) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

// TestReview21RoundAfterConflictRetry: a status write of round 8 hits a conflict; a
// retry-on-conflict loop re-reads and finds round 8 already there (a deposed replica's late
// write landed at 40 s). Writing round 9 on the 11 s confirmation would let a pod's read of
// round 7 just before 40 s supply S (C1 through the back door). mayWriteRound demands a new
// confirmation: sound, as long as the wiring never mutates and resends in a client-go
// RetryOnConflict loop.
func TestReview21RoundAfterConflictRetry(t *testing.T) {
	in := roundInput{
		seen: true, seenRound: 8, seenAt: ts(40.1),
		confirm: confirmation{sent: ts(11), done: true, held: true, token: gTok},
		next:    9, token: gTok,
	}
	if got := mayWriteRound(in); got != roundConfirm {
		t.Errorf("mayWriteRound(re-read shows a late round, old confirmation) = %v, want %v", got, roundConfirm)
	}
}
