package leadership

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// linRead is a consistent read of gUID sent at sent and answered at received, showing round
// vouching for roundToken, with held the token Held by this pod (0: the term is over).
func linRead(sent, received float64, round, roundToken, held int64) globalRead {
	o := cread(sent, round, roundToken, held)
	o.received = at(received)
	return o
}

// TestReviewLinGlobalNewestInRealTime (review rev-lin of e653149): two reads in flight at
// once, A (sent 10, answered 14) showing round 7 and the term over, B (sent 12, answered 20)
// showing round 5 and the term Held by this pod. Rounds only go up, so A was linearized after
// B: A is the newest consistent read, and it shows the term over (R5: "the newest consistent
// read still shows the term"; vouchingRound: "once a read shows the term over, no earlier read
// keeps it"). Before e653149 the send order 7, 5 refused the object (regressed); since, no
// regression is seen (right), but vouchingRound still takes the newest read by send order
// (B), and the bound is S + D - m: a bound where there was none.
func TestReviewLinGlobalNewestInRealTime(t *testing.T) {
	other := gToken + 1
	reads := []globalRead{
		linRead(0, 1, 3, gToken-5, 0),      // round 3: an earlier term (S)
		linRead(2, 3, 4, gToken, gToken),   // round 4: the grant
		linRead(10, 14, 7, other, 0),       // A: rounds 6, 7 later, the term over
		linRead(12, 20, 5, gToken, gToken), // B: round 5 vouching, linearized before A
	}
	g := recordReads(reads[0], reads[1], reads[2], reads[3]) // in reception order
	until, why := g.validUntil(gUID, at(1000), gToken, 0)
	if why == globalOK {
		t.Errorf("validUntil = %v, %v: the pod leads term %d on read B (round 5) after read A, linearized after it (round 7), showed the term over; want a refusal (globalNoRound)",
			until.Sub(0), why, gToken)
	}
	if until, why := globalDeadline(reads, gToken, 0); why == globalOK {
		t.Errorf("globalDeadline = %v, %v; want a refusal: the newest read in real time shows the term over", until.Sub(0), why)
	}
}

// TestReviewLinGlobalMergedReadsKeepRegression (review rev-lin of e653149): merged repeats of
// a round keep the earliest reception, so a read sent after it showing a lower round is still
// a regression even when it arrives after the merge.
func TestReviewLinGlobalMergedReadsKeepRegression(t *testing.T) {
	tests := []struct {
		name  string
		reads []globalRead // in reception order
		want  bool
	}{
		{"round 5 answered at 1, repeated at 10-11; a read sent at 5 answered at 12 shows round 4",
			[]globalRead{linRead(0, 1, 5, gToken, gToken), linRead(10, 11, 5, gToken, gToken), linRead(5, 12, 4, gToken, gToken)}, true},
		{"round 5 answered at 1 and 11; a read sent at 0.5 (in flight with the first) shows round 4",
			[]globalRead{linRead(0, 1, 5, gToken, gToken), linRead(10, 11, 5, gToken, gToken), linRead(0.5, 12, 4, gToken, gToken)}, false},
		{"a restored store after many merged repeats",
			[]globalRead{linRead(0, 1, 5, gToken, gToken), linRead(2, 3, 5, gToken, gToken), linRead(4, 5, 5, gToken, gToken), linRead(6, 7, 3, gToken, gToken)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g globalReads
			for _, o := range tt.reads {
				g.add(o)
			}
			if got := g.regressed == gUID; got != tt.want {
				t.Errorf("regressed = %v, want %v (kept reads %+v)", got, tt.want, g.reads)
			}
			if _, why := g.validUntil(gUID, at(1000), gToken, 0); (why == globalRegressed) != tt.want {
				t.Errorf("validUntil refusal %v, regressed want %v", why, tt.want)
			}
		})
	}
}

// TestReviewLinAbandonBeforeRunHoldsBackBothLineages (review rev-lin of 7da0f8c): Abandon
// before Run marks both lineages, so a grant of that number is not led in either scope.
func TestReviewLinAbandonBeforeRunHoldsBackBothLineages(t *testing.T) {
	e := &Elector{abandons: make(chan struct{}, 1)}
	e.Abandon(7)
	me := gUID
	for _, scope := range []lockv1.Scope{lockv1.ScopeCluster, lockv1.ScopeGlobal} {
		lock := &lockv1.DistributedLock{
			ObjectMeta: metav1.ObjectMeta{Name: "l", Namespace: "ns"},
			Spec:       lockv1.DistributedLockSpec{Scope: scope, GlobalName: "g"},
			Status:     lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, HolderUID: me, GlobalHolderUID: me, FencingToken: 7, MaxFencingToken: 7, TermLeaseSeconds: 15},
		}
		v := inClusterView(lock)
		lin := lineageOf(v)
		if g := judge(v, me, e.released.load(lin), e.abandoned.load(lin)); g == grantLead {
			t.Errorf("scope %s: a grant of token 7 abandoned before Run is led (judge = %v)", scope, g)
		}
	}
}
