package leadership

import (
	"testing"
	"time"
)

// TestStopOverdue: LivezCheck fails only while stop callbacks are pending, and only once more
// than the limit has passed since their term ended.
func TestStopOverdue(t *testing.T) {
	const limit = 25 * time.Second
	ended := instant(1_000 * time.Second)
	tests := []struct {
		name    string
		pending bool
		after   time.Duration // from the end of the term to the check
		fails   bool
	}{
		{"nothing pending", false, time.Hour, false},
		{"pending, just ended", true, 0, false},
		{"pending, within the limit", true, limit - time.Millisecond, false},
		{"pending, exactly at the limit", true, limit, false},
		{"pending, past the limit", true, limit + time.Millisecond, true},
		{"pending, long past", true, time.Hour, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := stopOverdue(tt.pending, ended, ended.Add(tt.after), limit)
			if (err != nil) != tt.fails {
				t.Errorf("stopOverdue(%v, end, end+%v, %v) = %v, want failing %v", tt.pending, tt.after, limit, err, tt.fails)
			}
		})
	}
}
