package lease

import (
	"testing"
	"time"
)

// A grant may be learned from history only while the waiter's last
// linearizable read that showed it waiting is younger than one period.
func TestHistoryUsable(t *testing.T) {
	const period = 2 * time.Second
	n := instant(0).Add(time.Hour)
	for _, tc := range []struct {
		name string
		seen instant
		want bool
	}{
		{"no such read", 0, false},
		{"just now", n, true},
		{"within the period", n.Add(-period + time.Millisecond), true},
		{"one period ago", n.Add(-period), false},
		{"long ago", n.Add(-3 * period), false},
	} {
		if got := historyUsable(tc.seen, n, period); got != tc.want {
			t.Errorf("%s: historyUsable = %v, want %v", tc.name, got, tc.want)
		}
	}
}
