package controllers

import (
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/pkg/clock"
)

// ts is the instant s seconds after this process's clock zero.
func ts(s float64) clock.Instant { return clock.Instant(time.Duration(s * float64(time.Second))) }

const gTok = int64(900) // the global grant's token

func TestMayWriteRound(t *testing.T) {
	ok := func(sent float64) confirmation {
		return confirmation{sent: ts(sent), done: true, held: true, token: gTok}
	}
	tests := []struct {
		name string
		in   roundInput
		want roundVerdict
	}{
		{
			name: "a confirmation sent after round r was seen",
			in:   roundInput{seen: true, seenRound: 7, seenAt: ts(10), confirm: ok(10.1), next: 8, token: gTok},
			want: roundWrite,
		},
		{
			name: "the first round of an object read with none",
			in:   roundInput{seen: true, seenRound: 0, seenAt: ts(1), confirm: ok(2), next: 1, token: gTok},
			want: roundWrite,
		},
		{
			name: "publishing a grant: its transaction, sent after the last round was seen, confirms it",
			in:   roundInput{seen: true, seenRound: 12, seenAt: ts(3), confirm: ok(4), next: 13, token: gTok},
			want: roundWrite,
		},
		{
			// The manager confirmed at 5 s, sent round 8, paused; the write landed late and its
			// acknowledgement arrived at 40 s. The confirmation of 5 s is older than that
			// evidence: round 9 needs a new one (which fails if the grant is gone by then).
			name: "late-landing write: the confirmation before it does not carry the next round",
			in:   roundInput{seen: true, seenRound: 8, seenAt: ts(40), confirm: ok(5), next: 9, token: gTok},
			want: roundConfirm,
		},
		{
			name: "a confirmation sent at the instant the round was seen is not after it",
			in:   roundInput{seen: true, seenRound: 7, seenAt: ts(10), confirm: ok(10), next: 8, token: gTok},
			want: roundConfirm,
		},
		{
			name: "the confirmation after the late write fails: the grant is gone",
			in: roundInput{seen: true, seenRound: 8, seenAt: ts(40),
				confirm: confirmation{sent: ts(40.5), done: true, held: false, token: gTok}, next: 9, token: gTok},
			want: roundLost,
		},
		{
			name: "a confirmation still in flight (or ambiguous) confirms nothing",
			in: roundInput{seen: true, seenRound: 7, seenAt: ts(10),
				confirm: confirmation{sent: ts(11), token: gTok}, next: 8, token: gTok},
			want: roundConfirm,
		},
		{
			name: "an ambiguous write of round r is not seeing it committed",
			in:   roundInput{seen: false, confirm: ok(11), next: 8, token: gTok},
			want: roundObserve,
		},
		{
			name: "a confirmation of another token does not vouch for this one",
			in: roundInput{seen: true, seenRound: 7, seenAt: ts(10),
				confirm: confirmation{sent: ts(11), done: true, held: true, token: gTok - 1}, next: 8, token: gTok},
			want: roundConfirm,
		},
		{
			name: "a jump of two rounds",
			in:   roundInput{seen: true, seenRound: 7, seenAt: ts(10), confirm: ok(11), next: 9, token: gTok},
			want: roundNotNext,
		},
		{
			// A held compare CreateRevision(K) == 0 shows K absent: it confirms no grant.
			name: "a round for token 0",
			in: roundInput{seen: true, seenRound: 7, seenAt: ts(10),
				confirm: confirmation{sent: ts(11), done: true, held: true, token: 0}, next: 8, token: 0},
			want: roundNoToken,
		},
		{
			name: "the same round again",
			in:   roundInput{seen: true, seenRound: 7, seenAt: ts(10), confirm: ok(11), next: 7, token: gTok},
			want: roundNotNext,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mayWriteRound(tt.in); got != tt.want {
				t.Errorf("mayWriteRound(%+v) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestMayRenewGrant(t *testing.T) {
	p := 5 * time.Second
	base := renewInput{
		now: ts(21), owner: true, apiReachable: true,
		acked: true, ackSent: ts(20), ackAt: ts(20.2),
		renewed: true, renewSent: ts(15.3), period: p,
	}
	with := func(f func(*renewInput)) renewInput { in := base; f(&in); return in }
	tests := []struct {
		name string
		in   renewInput
		want renewVerdict
	}{
		{name: "a round sent after the last keepalive was acknowledged just now", in: base, want: renewNow},
		{name: "the first keepalive after the grant's publication", in: with(func(in *renewInput) { in.renewed = false }), want: renewNow},
		{name: "the election is lost", in: with(func(in *renewInput) { in.owner = false }), want: renewNotOwner},
		{
			// etcd answers, the API server does not: the rounds cannot land, the pods lose
			// validity, and the other cluster must be able to take over.
			name: "cut off from the API server but not from etcd",
			in:   with(func(in *renewInput) { in.apiReachable = false }),
			want: renewCutOff,
		},
		{
			name: "no round acknowledged since the previous keepalive",
			in:   with(func(in *renewInput) { in.renewSent = ts(20.5) }),
			want: renewNoRound,
		},
		{
			name: "a round sent at the instant of the previous keepalive does not count",
			in:   with(func(in *renewInput) { in.renewSent = ts(20) }),
			want: renewNoRound,
		},
		{name: "no round ever acknowledged", in: with(func(in *renewInput) { in.acked = false; in.renewed = false }), want: renewNoRound},
		{
			// The manager paused after the acknowledgement: what the API server does now is
			// unknown.
			name: "the acknowledgement is older than one round period",
			in:   with(func(in *renewInput) { in.now = ts(25.3) }),
			want: renewStaleAck,
		},
		{name: "exactly one period old", in: with(func(in *renewInput) { in.now = ts(25.2) }), want: renewNow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mayRenewGrant(tt.in); got != tt.want {
				t.Errorf("mayRenewGrant(%+v) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestDecideTakeover(t *testing.T) {
	d := 30 * time.Second
	// Observed gone at revision 500, received at 100 s; waiting record committed at 502.
	base := takeoverInput{
		now: ts(131), ownDelay: d,
		gone: true, goneRev: 500, goneAt: ts(100), goneDelay: d,
		tomb: tombstoneWrite{sent: true, basis: 500, answered: true, held: true, rev: 502},
	}
	with := func(f func(*takeoverInput)) takeoverInput { in := base; f(&in); return in }
	tests := []struct {
		name string
		in   takeoverInput
		want takeover
	}{
		{name: "D after the reception, tombstone unchanged", in: base, want: takeover{verb: takeGrant, tombRev: 502}},
		{name: "exactly D", in: with(func(in *takeoverInput) { in.now = ts(130) }), want: takeover{verb: takeGrant, tombRev: 502}},
		{name: "before D", in: with(func(in *takeoverInput) { in.now = ts(120) }), want: takeover{verb: takeWait, wait: 10 * time.Second}},
		{
			name: "nothing observed gone",
			in:   takeoverInput{now: ts(10), ownDelay: d},
			want: takeover{verb: takeIdle},
		},
		{
			name: "observed gone, no waiting record yet: write it against the observation's revision",
			in:   with(func(in *takeoverInput) { in.tomb = tombstoneWrite{} }),
			want: takeover{verb: takeTombstone, basis: 500},
		},
		{
			name: "a waiting record of an older observation: a new one for this observation",
			in:   with(func(in *takeoverInput) { in.goneRev = 610 }),
			want: takeover{verb: takeTombstone, basis: 610},
		},
		{
			// A watch reset at 125 s re-read both keys at revision 610: K still absent, T still
			// at the own record 502. The wait stands and counts from 100 s, not 125 s.
			name: "a newer observation shows the own record standing: the wait counts from the first reception",
			in: with(func(in *takeoverInput) {
				in.now, in.goneRev, in.goneAt, in.tomb.basisAt, in.tombMod = ts(125.5), 610, ts(125), ts(100), 502
			}),
			want: takeover{verb: takeWait, wait: 4500 * time.Millisecond},
		},
		{
			name: "a newer observation shows the own record standing, D after the first reception: grant",
			in: with(func(in *takeoverInput) {
				in.goneRev, in.goneAt, in.tomb.basisAt, in.tombMod = 610, ts(125), ts(100), 502
			}),
			want: takeover{verb: takeGrant, tombRev: 502},
		},
		{
			name: "a newer observation shows the tombstone changed since the own record: a new record",
			in: with(func(in *takeoverInput) {
				in.goneRev, in.goneAt, in.tomb.basisAt, in.tombMod = 610, ts(125), ts(100), 507
			}),
			want: takeover{verb: takeTombstone, basis: 610},
		},
		{
			name: "a newer observation shows another cluster's record: yield",
			in: with(func(in *takeoverInput) {
				in.goneRev, in.goneAt, in.tomb.basisAt, in.tombMod = 610, ts(125), ts(100), 507
				in.rival, in.rivalSince = true, ts(125)
			}),
			want: takeover{verb: takeYield, wait: 54 * time.Second},
		},
		{
			// No etcd reply says a transaction that compared ModRevision(T) <= 500 held at 500.
			name: "a held waiting record at its basis revision: bad input, start over",
			in:   with(func(in *takeoverInput) { in.tomb.rev = 500 }),
			want: takeover{verb: takeRestart},
		},
		{
			name: "the waiting record's reply is due",
			in:   with(func(in *takeoverInput) { in.tomb = tombstoneWrite{sent: true, basis: 500} }),
			want: takeover{verb: takePending},
		},
		{
			// The record's transaction compares that nothing changed the tombstone since
			// revision 500: a grant between the observation and the record (the other
			// cluster granting again, whose pods then lead) makes it fail.
			name: "a grant between the observation and the waiting record: refused, start over",
			in:   with(func(in *takeoverInput) { in.tomb.held = false; in.tomb.rev = 0 }),
			want: takeover{verb: takeRestart},
		},
		{
			name: "the waiting record's outcome is unknown: start over",
			in:   with(func(in *takeoverInput) { in.tomb = tombstoneWrite{sent: true, basis: 500, ambiguous: true} }),
			want: takeover{verb: takeRestart},
		},
		{
			// The record landed late (its reply came 25 s after the reception). Its compare
			// proves no grant since revision 500, so the wait still counts from 100 s.
			name: "late-landing waiting record: the wait counts from the reception",
			in:   with(func(in *takeoverInput) { in.now = ts(130.5); in.tombMod = 502 }),
			want: takeover{verb: takeGrant, tombRev: 502},
		},
		{
			name: "the tombstone changed since the waiting record: start over",
			in:   with(func(in *takeoverInput) { in.tombMod = 507 }),
			want: takeover{verb: takeRestart},
		},
		{
			name: "the grant key is back",
			in:   with(func(in *takeoverInput) { in.keyPresent = true }),
			want: takeover{verb: takeIdle},
		},
		{
			name: "the gone grant's record carries a longer delay than this cluster's",
			in:   with(func(in *takeoverInput) { in.goneDelay = 60 * time.Second }),
			want: takeover{verb: takeWait, wait: 29 * time.Second},
		},
		{
			name: "this cluster's delay is the longer",
			in:   with(func(in *takeoverInput) { in.ownDelay = 45 * time.Second; in.goneDelay = 0 }),
			want: takeover{verb: takeWait, wait: 14 * time.Second},
		},
		{
			name: "another cluster is waiting: yield",
			in: with(func(in *takeoverInput) {
				in.tomb = tombstoneWrite{}
				in.rival, in.rivalSince = true, ts(110)
			}),
			want: takeover{verb: takeYield, wait: 39 * time.Second},
		},
		{
			name: "another cluster's waiting record stood for twice the wait: write ours",
			in: with(func(in *takeoverInput) {
				in.tomb = tombstoneWrite{}
				in.rival, in.rivalSince, in.now = true, ts(60), ts(121)
			}),
			want: takeover{verb: takeTombstone, basis: 500},
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
