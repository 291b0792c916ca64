package leadership

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// cread, event, at, gUID, gToken and gDelay are global_internal_test.go's (D = 30 s, m = 2 s).

// recordReads adds reads to a fresh globalReads, in the order their answers arrived: each
// read's answer arrives no earlier than the one added before it (its received is raised to
// that one's when lower), as the loop and the ResourceLock add reads.
func recordReads(reads ...globalRead) *globalReads {
	var g globalReads
	var last instant
	for _, o := range reads {
		o.received = max(o.received, last)
		last = o.received
		g.add(o)
	}
	return &g
}

func TestGlobalReadsBound(t *testing.T) {
	other := gToken - 10
	tests := []struct {
		name  string
		reads []globalRead
		want  instant
		why   globalRefusal
	}{
		{
			name:  "rounds r0 and r0+1 after a read of r0-1: S is that read",
			reads: []globalRead{cread(0, 1, other, 0), cread(2, 1, other, 0), cread(4, 2, gToken, gToken), cread(5, 3, gToken, gToken)},
			want:  at(2).Add(gDelay - 2*time.Second),
		},
		{
			name:  "a watch event is not recorded",
			reads: []globalRead{cread(0, 1, other, 0), event(3, 1, other, 0), cread(4, 2, gToken, gToken), cread(5, 3, gToken, gToken)},
			want:  at(0).Add(gDelay - 2*time.Second),
		},
		{
			name:  "a read of another object replaces the kept ones",
			reads: []globalRead{cread(0, 1, other, 0), {sent: at(3), received: at(3), consistent: true, lockUID: "new-uid", round: 1, roundToken: other, delay: gDelay}, cread(4, 2, gToken, gToken), cread(5, 3, gToken, gToken)},
			why:   globalNoEarlier,
		},
		{
			name:  "rounds that went down refuse, and keep refusing after they climb again",
			reads: []globalRead{cread(0, 1, other, 0), cread(1, 2, gToken, gToken), cread(2, 3, gToken, gToken), cread(3, 2, gToken, gToken), cread(4, 3, gToken, gToken), cread(5, 4, gToken, gToken), cread(6, 5, gToken, gToken)},
			why:   globalRegressed,
		},
		{
			name: "a regression is remembered after its reads are dropped",
			reads: func() []globalRead {
				rs := []globalRead{cread(0, 5, gToken, gToken), cread(1, 4, gToken, gToken)}
				for i := range 2 * globalKeep {
					rs = append(rs, cread(float64(2+i), int64(5+i), gToken, gToken))
				}
				return rs
			}(),
			why: globalRegressed,
		},
		{
			name: "the bound survives many reads: S is the newest read of r-2",
			reads: func() []globalRead {
				var rs []globalRead
				for i := range 3 * globalKeep {
					rs = append(rs, cread(float64(i), int64(1+i/2), gToken, gToken)) // two reads per round
				}
				return rs
			}(),
			// The last read is at 47 s showing round 24; S is the newest read of round 22, at 43 s.
			want: at(43).Add(gDelay - 2*time.Second),
		},
		{
			name: "the lowest delay of a token survives dropping the read that showed it",
			reads: func() []globalRead {
				rs := []globalRead{withDelay(cread(0, 1, gToken, gToken), 20*time.Second)}
				for i := range 2 * globalKeep {
					rs = append(rs, cread(float64(1+i), int64(2+i), gToken, gToken))
				}
				return rs
			}(),
			// The last read shows round 33 at 32 s; S is the read of round 31, at 30 s.
			want: at(30).Add(20*time.Second - 2*time.Second),
		},
		{
			name:  "a read answered out of order is kept in send order",
			reads: []globalRead{cread(0, 1, other, 0), cread(5, 3, gToken, gToken), cread(4, 2, gToken, gToken)},
			want:  at(0).Add(gDelay - 2*time.Second),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := recordReads(tt.reads...)
			if n := len(g.reads); n > globalKeep {
				t.Errorf("kept %d reads, want at most %d", n, globalKeep)
			}
			got, why := g.validUntil(gUID, at(1000), gToken, 0)
			if why != tt.why || got != tt.want {
				t.Errorf("validUntil = %v, %v; want %v, %v", got.Sub(0), why, tt.want.Sub(0), tt.why)
			}
		})
	}
}

func TestGlobalReadsMerge(t *testing.T) {
	g := recordReads(cread(0, 1, gToken, 0), cread(1, 1, gToken, 0), withDelay(cread(2, 1, gToken, 0), 20*time.Second), cread(3, 1, gToken, 0), cread(4, 2, gToken, gToken))
	if len(g.reads) != 2 {
		t.Fatalf("kept %d reads, want 2 (one per round)", len(g.reads))
	}
	if o := g.reads[0]; o.sent != at(3) || o.delay != 20*time.Second {
		t.Errorf("round 1's read: sent %v, delay %v; want the newest (3s) with the lowest delay (20s)", o.sent.Sub(0), o.delay)
	}
	g.clear()
	if len(g.reads) != 0 {
		t.Errorf("after clear: %d reads, want 0", len(g.reads))
	}
}

func TestGlobalReadsRoundAhead(t *testing.T) {
	g := recordReads(cread(0, 3, gToken, gToken), cread(1, 4, gToken, gToken))
	tests := []struct {
		uid   types.UID
		round int64
		want  bool
	}{
		{gUID, 5, true},
		{gUID, 4, false},
		{gUID, 2, false},
		{gUID, 0, false},
		{"other-uid", 1, true},
	}
	for _, tt := range tests {
		if got := g.roundAhead(tt.uid, tt.round); got != tt.want {
			t.Errorf("roundAhead(%s, %d) = %v, want %v", tt.uid, tt.round, got, tt.want)
		}
	}
}

func TestGlobalInClusterView(t *testing.T) {
	const me = types.UID("pod-me")
	lock := func(scope lockv1.Scope, holderUID, globalHolderUID types.UID) *lockv1.DistributedLock {
		return &lockv1.DistributedLock{
			ObjectMeta: metav1.ObjectMeta{UID: gUID},
			Spec:       lockv1.DistributedLockSpec{Scope: scope},
			Status: lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, HolderUID: holderUID, GlobalHolderUID: globalHolderUID,
				FencingToken: gToken, MaxFencingToken: gToken, GlobalRound: 7, GlobalToken: gToken, GlobalLockDelaySeconds: 30},
		}
	}
	tests := []struct {
		name string
		lock *lockv1.DistributedLock
		want types.UID // the view's holderUID
	}{
		{"Cluster: holderUID as it is", lock(lockv1.ScopeCluster, me, ""), me},
		{"Cluster: globalHolderUID ignored", lock(lockv1.ScopeCluster, "", me), ""},
		{"unset scope is Cluster", lock("", me, "other"), me},
		{"Global: the holder is globalHolderUID", lock(lockv1.ScopeGlobal, "", me), me},
		{"Global: a holderUID is ignored", lock(lockv1.ScopeGlobal, me, ""), ""},
		{"Global held by another cluster: no holder", lock(lockv1.ScopeGlobal, "", ""), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.lock.Status.HolderUID
			v := inClusterView(tt.lock)
			if v.Status.HolderUID != tt.want {
				t.Errorf("inClusterView: holderUID %q, want %q", v.Status.HolderUID, tt.want)
			}
			if tt.lock.Status.HolderUID != before {
				t.Errorf("inClusterView changed its argument's holderUID to %q", tt.lock.Status.HolderUID)
			}
			if !tt.lock.Spec.IsGlobal() && v != tt.lock {
				t.Errorf("inClusterView of a Cluster lock is a copy, want the lock itself")
			}
			if got := judge(v, me, 0, 0); (got == grantLead) != (tt.want == me) {
				t.Errorf("judge(view) = %v, want lead %v", got, tt.want == me)
			}
		})
	}
	if inClusterView(nil) != nil {
		t.Errorf("inClusterView(nil) != nil")
	}
	o := readOf(inClusterView(lock(lockv1.ScopeGlobal, "", me)), at(3), at(4), me)
	want := globalRead{sent: at(3), received: at(4), consistent: true, lockUID: gUID, round: 7, roundToken: gToken, heldToken: gToken, delay: 30 * time.Second}
	if o != want {
		t.Errorf("readOf = %+v, want %+v", o, want)
	}
	if o := readOf(inClusterView(lock(lockv1.ScopeGlobal, "", "other")), at(3), at(4), me); o.heldToken != 0 {
		t.Errorf("readOf another pod's term: heldToken %d, want 0", o.heldToken)
	}
}

func TestGlobalCapRenewal(t *testing.T) {
	tm := timings{renewDeadline: 3 * time.Second, retryPeriod: time.Second} // belief 4 s
	ok := renewal{token: gToken, deadline: at(20)}
	tests := []struct {
		name    string
		r       renewal
		until   instant
		why     globalRefusal
		done    instant
		want    instant
		wantErr error
	}{
		{name: "the global bound is earlier", r: ok, until: at(15), done: at(10), want: at(15)},
		{name: "the in-cluster bound is earlier", r: ok, until: at(25), done: at(10), want: at(20)},
		{name: "too little global validity left for client-go", r: ok, until: at(13), done: at(10), wantErr: errConfirmedLate},
		{name: "waiting for rounds is not granted", r: ok, why: globalNoEarlier, done: at(10), wantErr: ErrNotGranted},
		{name: "no vouching round is not granted", r: ok, why: globalNoRound, done: at(10), wantErr: ErrNotGranted},
		{name: "a regression refuses for good", r: ok, why: globalRegressed, done: at(10), wantErr: ErrGlobalRefused},
		{name: "a bad delay refuses for good", r: ok, why: globalBadDelay, done: at(10), wantErr: ErrGlobalRefused},
		{name: "an in-cluster refusal stands", r: renewal{err: ErrNotGranted}, until: at(15), done: at(10), wantErr: ErrNotGranted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := capRenewal(tt.r, tt.until, tt.why, tm, tt.done)
			if tt.wantErr != nil {
				if !errors.Is(got.err, tt.wantErr) {
					t.Errorf("capRenewal: err %v, want %v", got.err, tt.wantErr)
				}
				if errors.Is(tt.wantErr, ErrGlobalRefused) && !isRefusal(got.err) {
					t.Errorf("capRenewal: %v is not a refusal for readiness", got.err)
				}
				return
			}
			if got.err != nil || got.deadline != tt.want || got.token != gToken {
				t.Errorf("capRenewal = %v, %d, %v; want %v, %d, nil", got.deadline.Sub(0), got.token, got.err, tt.want.Sub(0), gToken)
			}
		})
	}
}
