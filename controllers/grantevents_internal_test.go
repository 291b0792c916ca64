package controllers

import (
	"testing"
	"time"
)

// The grant Event budget sends a burst, then the sustained rate; the first grant it holds
// back in a run gets the notice, later ones only the metric; once the bucket is full again a
// new run gets a new notice.
func TestEventBudget(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newEventBudget(2, 3, func() time.Time { return now })
	type want struct{ send, notice bool }
	step := func(name string, advance time.Duration, w want) {
		t.Helper()
		now = now.Add(advance)
		if send, notice := b.take(); send != w.send || notice != w.notice {
			t.Fatalf("%s: take() = send %v, notice %v, want %v, %v", name, send, notice, w.send, w.notice)
		}
	}
	for i := range 3 {
		step("burst "+string(rune('1'+i)), 0, want{send: true})
	}
	step("first held back", 0, want{notice: true})
	step("second held back", 0, want{})
	step("refilled half a token", 250*time.Millisecond, want{})
	step("refilled one token", 250*time.Millisecond, want{send: true})
	step("empty again, same run", 0, want{})
	step("full again after 1.5 s", 1500*time.Millisecond, want{send: true})
	step("burst", 0, want{send: true})
	step("burst", 0, want{send: true})
	step("a new run gets a new notice", 0, want{notice: true})
}
