package controllers_test

import (
	"testing"
	"time"
)

// pollInterval is how often eventually and consistently look.
const pollInterval = 50 * time.Millisecond

// eventually polls cond until it holds, and fails with msg() once timeout has passed
// without it.
func eventually(t testing.TB, timeout time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, msg())
		}
		time.Sleep(pollInterval)
	}
}

// consistently polls cond for the whole window and fails with msg() the first time it does
// not hold: for "nothing happens", where a single check after a sleep would miss a
// transient.
func consistently(t testing.TB, window time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(window)
	for {
		if !cond() {
			t.Fatalf("within %v: %s", window, msg())
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(pollInterval)
	}
}

// secondApart waits until the clock has moved past the next whole second: the API server
// records creation and Ready transition times with one-second resolution, and the tests of
// OldestReady and FirstReady need two pods' times to differ. It waits for time to pass,
// not for a condition, so it is not an eventually.
func secondApart() { time.Sleep(1100 * time.Millisecond) }
