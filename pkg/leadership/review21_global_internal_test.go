package leadership

import (
	"testing"
	"time"
)

// Adversarial review of the global bound (issue 21, docs/global.md R5): timelines the review
// checked against the proof and found sound, as rows of globalDeadline. cread, at, gToken and
// gDelay are global_internal_test.go's (D = 30 s, m = 2 s).

func TestReview21GlobalDeadlineTimelines(t *testing.T) {
	other := gToken + 50 // a later token (a new grant), never this pod's
	tests := []struct {
		name  string
		reads []globalRead
		want  instant
		why   globalRefusal
	}{
		{
			// docs/global.md C1 with its numbers: A's manager saw round 5 and confirmed at 0 s,
			// sent round 6, paused; B granted at 50 s; round 6 lands at 55 s. The pod read
			// round 4 at -6 s and round 5 from -2 s to 54 s. Its bound is -6 + 28 = 22 s, before
			// B's grant at 50 s, not 54 + 28 = 82 s.
			name: "C1: a late round 6 after reads of 5 up to 54 s",
			reads: []globalRead{
				cread(-6, 4, gToken, gToken),
				cread(-2, 5, gToken, gToken),
				cread(10, 5, gToken, gToken),
				cread(30, 5, gToken, gToken),
				cread(54, 5, gToken, gToken),
				cread(56, 6, gToken, gToken),
			},
			want: at(22),
		},
		{
			// A round for a later token while the status still shows this pod Held (a publish
			// split over two writes): the round of the later token proves K had another
			// CreateRevision, i.e. this pod's grant is gone. The pod keeps only the bound of
			// its own highest round (5): S stays the read of round 3, which Lemma 3 bounds.
			name: "a later round for another token does not move the bound",
			reads: []globalRead{
				cread(0, 3, gToken, gToken),
				cread(5, 4, gToken, gToken),
				cread(10, 5, gToken, gToken),
				cread(15, 6, other, gToken),
				cread(20, 6, other, gToken),
			},
			want: at(28),
		},
		{
			// The pod read only round 5 and later of its own term (its first read came after
			// the grant's rounds r0 = 4 and 5): it waits for round 7, and then S is its read of
			// round 5, which was answered before round 6 committed.
			name: "no read before the term: leads from round r+2 of its first read",
			reads: []globalRead{
				cread(10, 5, gToken, gToken),
				cread(15, 6, gToken, gToken),
				cread(20, 7, gToken, gToken),
			},
			want: at(10).Add(gDelay - 2*time.Second),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := globalDeadline(tt.reads, gToken, 0)
			if why != tt.why || got != tt.want {
				t.Errorf("globalDeadline = %v, %v; want %v, %v", got.Sub(0), why, tt.want.Sub(0), tt.why)
			}
		})
	}
}
