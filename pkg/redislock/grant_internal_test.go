package redislock

import (
	"strings"
	"testing"
)

func TestAskLog(t *testing.T) {
	var a askLog
	if _, ok := a.sentOf(1); ok {
		t.Error("sentOf(1) before any request: ok, want unknown")
	}
	for i := range 20 {
		if n := a.next(instant(100 * (i + 1))); n != uint64(i+1) {
			t.Fatalf("next #%d = %d, want %d", i+1, n, i+1)
		}
	}
	tests := []struct {
		ask  uint64
		want instant
		ok   bool
	}{
		{ask: 20, want: 2000, ok: true},
		{ask: 13, want: 1300, ok: true},                 // the oldest remembered (askMemory 8)
		{ask: 12, ok: false},                            // forgotten: never guess a later send time
		{ask: 21, ok: false},                            // not sent yet
		{ask: 0, ok: false},                             // TryAcquire's number: never a waiter's
		{ask: 20 - askMemory + 1, want: 1300, ok: true}, // = 13
	}
	for _, tt := range tests {
		got, ok := a.sentOf(tt.ask)
		if ok != tt.ok || (ok && got != tt.want) {
			t.Errorf("sentOf(%d) = %d, %v; want %d, %v", tt.ask, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseHandoff(t *testing.T) {
	n := strings.Repeat("ab", 16)
	tests := []struct {
		in   string
		want handoff
		ok   bool
	}{
		{in: "c1/4 7 " + n + " 12 worker 1", want: handoff{id: "c1/4", ask: 7, v: value{nonce: n, token: 12, holder: "worker 1"}}, ok: true},
		{in: "c1/4"},                  // a wake-up
		{in: "c1/4 x " + n + " 12 w"}, // no ask number
		{in: "c1/4 7 short 12 w"},     // not a lock value
		{in: "c1/4 7 " + n + " 0 w"},  // token 0 is never granted
		{in: "c1/4 -1 " + n + " 3 w"}, // negative ask
		{in: ""},
	}
	for _, tt := range tests {
		got, ok := parseHandoff(tt.in)
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseHandoff(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
	if id := waiterOf("c1/4 7 " + n + " 12 w"); id != "c1/4" {
		t.Errorf("waiterOf(grant) = %q, want c1/4", id)
	}
	if id := waiterOf("c1/4"); id != "c1/4" {
		t.Errorf("waiterOf(wake) = %q, want c1/4", id)
	}
}

// The waiter counts a handed-over grant from the send time of the request
// the grant names, never from anything later; anything it cannot place is
// refused (it asks Redis instead).
func TestSentBefore(t *testing.T) {
	n, other := strings.Repeat("ab", 16), strings.Repeat("cd", 16)
	var a askLog
	a.next(1000) // ask 1
	a.next(2000) // ask 2
	tests := []struct {
		name, payload string
		sent          instant
		ok            bool
	}{
		{name: "grant naming the newest request", payload: "c/1 2 " + n + " 5 w", sent: 2000, ok: true},
		{name: "grant naming an older request, later overtaken", payload: "c/1 1 " + n + " 5 w", sent: 1000, ok: true},
		{name: "grant naming a request not sent", payload: "c/1 3 " + n + " 5 w"},
		{name: "another waiter's grant", payload: "c/2 2 " + n + " 5 w"},
		{name: "another nonce", payload: "c/1 2 " + other + " 5 w"},
		{name: "a wake-up", payload: "c/1"},
	}
	for _, tt := range tests {
		h, sent, ok := sentBefore(tt.payload, "c/1", n, &a)
		if ok != tt.ok || sent != tt.sent || (ok && h.v.nonce != n) {
			t.Errorf("%s: sentBefore(%q) = %+v, %d, %v; want sent %d, ok %v", tt.name, tt.payload, h, sent, ok, tt.sent, tt.ok)
		}
	}
}

// sendTime never runs ahead of now: it is the clock of send times, where
// an earlier reading only shortens a validity.
func TestSendTimeNeverAheadOfNow(t *testing.T) {
	for range 10000 {
		s := sendTime()
		if n := now(); s > n {
			t.Fatalf("sendTime %d after now %d", s, n)
		}
	}
}
