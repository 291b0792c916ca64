package controllertest

import (
	"testing"
	"time"
)

// PollInterval is how often Eventually and Consistently look.
const PollInterval = 50 * time.Millisecond

// Eventually polls cond until it holds, and fails with msg() once timeout has passed
// without it.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", timeout, msg())
		}
		time.Sleep(PollInterval)
	}
}

// Consistently polls cond for the whole window and fails with msg() the first time it does
// not hold: for "nothing happens", where a single check after a sleep would miss a
// transient.
func Consistently(t testing.TB, window time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(window)
	for {
		if !cond() {
			t.Fatalf("within %v: %s", window, msg())
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(PollInterval)
	}
}
