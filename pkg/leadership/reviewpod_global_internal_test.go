package leadership

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// The adversarial review of the pod side of Global locks (rev-pod): rows that try to make
// globalReads lead longer than R5 allows (docs/global.md), or for a term not the pod's own.
// cread, at, gUID, gToken and gDelay are global_internal_test.go's (D = 30 s, m = 2 s).

// TestReviewPodGlobalReadsNeverLengthen: executions in which the kept reads could be thought to
// lengthen the bound or to lead a term that is not this pod's. Each row's want is what R5
// allows at most (or the refusal it needs).
func TestReviewPodGlobalReadsNeverLengthen(t *testing.T) {
	other := gToken - 10
	newer := gToken + 10
	const uid2 = types.UID("lock-uid-2")
	on := func(uid types.UID, o globalRead) globalRead {
		o.lockUID = uid
		return o
	}
	tests := []struct {
		name  string
		reads []globalRead
		uid   types.UID
		token int64
		want  instant
		why   globalRefusal
	}{
		{
			// The read that proves r-2 is pushed out by the 16-read cap under reads that all
			// show r-1 or r (the holder flipping in and out without a round step): the bound
			// must refuse, not take a later read as S.
			name: "the cap drops the only read at r-2: refused, not extended",
			reads: func() []globalRead {
				rs := []globalRead{cread(0, 1, other, 0), cread(1, 2, gToken, gToken)}
				for i := range globalKeep + 2 {
					held := gToken
					if i%2 == 1 {
						held = 0
					}
					rs = append(rs, cread(float64(2+i), 3, gToken, held))
				}
				return append(rs, cread(float64(4+globalKeep), 3, gToken, gToken))
			}(),
			uid: gUID, token: gToken, why: globalNoEarlier,
		},
		{
			// globalToken still names the pod's earlier token while fencingToken moved on:
			// neither the old nor the new term is vouched for by this read.
			name:  "globalToken matches the old term, fencingToken differs: the old term is over",
			reads: []globalRead{cread(0, 1, other, 0), cread(1, 2, gToken, gToken), cread(2, 3, gToken, gToken), cread(3, 3, gToken, newer)},
			uid:   gUID, token: gToken, why: globalNoRound,
		},
		{
			name:  "globalToken matches the old term, fencingToken differs: the new term is not vouched for",
			reads: []globalRead{cread(0, 1, other, 0), cread(1, 2, gToken, gToken), cread(2, 3, gToken, gToken), cread(3, 3, gToken, newer)},
			uid:   gUID, token: newer, why: globalNoRound,
		},
		{
			// The lock was deleted and created again under its name; the new object shows the
			// same token (a controller that republished it) at its round 2. Reads of the old
			// object, whose rounds were far ahead, prove nothing about the new one's.
			name: "the same token on a new object: the old object's reads do not supply S",
			reads: []globalRead{cread(0, 1, other, 0), cread(1, 2, gToken, gToken), cread(2, 3, gToken, gToken), cread(3, 4, gToken, gToken),
				on(uid2, cread(4, 1, gToken, gToken)), on(uid2, cread(5, 2, gToken, gToken))},
			uid: uid2, token: gToken, why: globalNoEarlier,
		},
		{
			name: "the same token on a new object: S is the new object's read of r-2",
			reads: []globalRead{cread(0, 1, other, 0), cread(1, 2, gToken, gToken), cread(2, 3, gToken, gToken), cread(3, 4, gToken, gToken),
				on(uid2, cread(4, 1, gToken, gToken)), on(uid2, cread(5, 2, gToken, gToken)), on(uid2, cread(6, 3, gToken, gToken))},
			uid: uid2, token: gToken, want: at(4).Add(gDelay - 2*time.Second),
		},
		{
			// An old object's read answered after the new object's (it cannot be in the elector,
			// whose reads are one at a time): it replaces the new object's reads, and the pod
			// leads nothing on it.
			name: "an old object's read answered late: the new object's reads are dropped, nothing led",
			reads: []globalRead{on(uid2, cread(4, 1, other, 0)), on(uid2, cread(5, 2, gToken, gToken)), on(uid2, cread(6, 3, gToken, gToken)),
				cread(3, 9, gToken, gToken)},
			uid: uid2, token: gToken, why: globalNoEarlier,
		},
		{
			// The term ended (the read of round 4 shows it not Held by the pod) and the same token
			// is Held again at round 5: S is the newest read at or below 3, never a read before
			// the gap that the new rounds do not cover.
			name:  "a term ended and Held again under the same token: S from r-2 of the new round",
			reads: []globalRead{cread(0, 1, other, 0), cread(1, 2, gToken, gToken), cread(2, 3, gToken, gToken), cread(3, 4, gToken, 0), cread(4, 5, gToken, gToken)},
			uid:   gUID, token: gToken, want: at(2).Add(gDelay - 2*time.Second),
		},
		{
			// Merging repeats keeps the newest read of a round: S can only be the newest read at
			// or below r-2, which R5 allows; an older one is never kept in its place.
			name:  "merged repeats of r-2: the newest one's send time, not the oldest's nor a later round's",
			reads: []globalRead{cread(0, 1, other, 0), cread(1, 1, other, 0), cread(2, 1, other, 0), cread(3, 2, gToken, gToken), cread(9, 3, gToken, gToken)},
			uid:   gUID, token: gToken, want: at(2).Add(gDelay - 2*time.Second),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := recordReads(tt.reads...)
			got, why := g.validUntil(tt.uid, at(1000), tt.token, 0)
			if why != tt.why || got != tt.want {
				t.Errorf("validUntil = %v, %v; want %v, %v", got.Sub(0), why, tt.want.Sub(0), tt.why)
			}
		})
	}
}

// TestReviewPodGlobalReadsOutOfOrderNoFalseRegression: globalReads keeps reads in send order
// so that a read answered out of order counts by its send time. Two reads in flight at once
// are linearized in either order, so a read sent earlier may show a HIGHER round than one sent
// later (sent 6 s, linearized after round 5 landed; sent 7 s, linearized before): rounds
// never went down, yet sorting by send time makes them look as if they had, and the object
// is refused for good. A liveness defect only, and only with two reads in flight (the
// elector's reads are one at a time, and client-go calls a ResourceLock's Get and Update one
// at a time).
func TestReviewPodGlobalReadsOutOfOrderNoFalseRegression(t *testing.T) {
	g := recordReads(cread(0, 1, gToken-10, 0), cread(2, 2, gToken, gToken), cread(4, 3, gToken, gToken),
		cread(7, 4, gToken, gToken), // answered first
		cread(6, 5, gToken, gToken)) // answered second, sent first
	got, why := g.validUntil(gUID, at(1000), gToken, 0)
	// r = 5, S = the newest read at or below 3 (sent at 4 s).
	if want := at(4).Add(gDelay - 2*time.Second); why != globalOK || got != want {
		t.Errorf("validUntil = %v, %v; want %v, ok: two reads in flight linearized in the other order are no regression", got.Sub(0), why, want.Sub(0))
	}
}
