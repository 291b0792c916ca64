package leadership

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// TestNewestRead: the newest consistent read is the one showing the highest round on the
// object the last read sent was of (ties: the later send), whatever the send order.
func TestNewestRead(t *testing.T) {
	other := cread(30, 1, gToken, gToken)
	other.lockUID = types.UID("lock-uid-2")
	tests := []struct {
		name  string
		reads []globalRead // in send order
		want  int
	}{
		{"none", nil, -1},
		{"only events", []globalRead{event(1, 5, gToken, gToken)}, -1},
		{"in order", []globalRead{cread(1, 4, gToken, gToken), cread(2, 5, gToken, gToken)}, 1},
		{"in flight, the earlier send shows the higher round", []globalRead{linRead(10, 14, 7, gToken, 0), linRead(12, 20, 5, gToken, gToken)}, 0},
		{"a tie: the later send", []globalRead{linRead(10, 14, 7, gToken, 0), linRead(12, 13, 7, gToken, gToken)}, 1},
		{"no rounds yet: the later send", []globalRead{cread(1, 0, 0, gToken), cread(2, 0, 0, 0)}, 1},
		{"an event is no read", []globalRead{cread(1, 4, gToken, gToken), event(2, 9, gToken, 0)}, 0},
		{"another object sent last: its reads only", []globalRead{cread(1, 9, gToken, gToken), other}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := newestRead(tt.reads); got != tt.want {
				t.Errorf("newestRead = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestGlobalDeadlineNewestByRound: with reads in flight at once, the term is judged on the
// read showing the highest round, and S is still the newest send showing round r-2 or below.
func TestGlobalDeadlineNewestByRound(t *testing.T) {
	m := globalMargin(gDelay, 0)
	tests := []struct {
		name  string
		reads []globalRead // in send order
		want  globalRefusal
		s     float64 // S when want is globalOK
	}{
		{"the later send shows a lower round and the term over: linearized first, the term stands",
			[]globalRead{linRead(0, 1, 3, gToken-5, 0), linRead(2, 3, 4, gToken, gToken), linRead(10, 20, 6, gToken, gToken), linRead(12, 14, 5, gToken, 0)},
			globalOK, 2},
		{"the earlier send shows a higher round and the term over: refused",
			[]globalRead{linRead(0, 1, 3, gToken-5, 0), linRead(2, 3, 4, gToken, gToken), linRead(10, 14, 6, gToken+1, 0), linRead(12, 20, 5, gToken, gToken)},
			globalNoRound, 0},
		{"a tie, the later send shows the term over: refused",
			[]globalRead{linRead(0, 1, 3, gToken-5, 0), linRead(2, 3, 4, gToken, gToken), linRead(10, 20, 5, gToken, gToken), linRead(12, 14, 5, gToken, 0)},
			globalNoRound, 0},
		{"in order, as before",
			[]globalRead{linRead(0, 1, 3, gToken-5, 0), linRead(2, 3, 4, gToken, gToken), linRead(5, 6, 5, gToken, gToken)},
			globalOK, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := globalDeadline(tt.reads, gToken, 0)
			if why != tt.want {
				t.Fatalf("globalDeadline = %v, %v; want %v", got.Sub(0), why, tt.want)
			}
			if why == globalOK && got != at(tt.s).Add(gDelay-m) {
				t.Errorf("globalDeadline = %v, want S + D - m = %v", got.Sub(0), at(tt.s).Add(gDelay-m).Sub(0))
			}
		})
	}
}
