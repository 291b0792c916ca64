package redischaos

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/redistest"
)

// stallLimit is the longest the lock may stand still, outside a pause, in
// TestHandoffRacesWaiterExpiry: a grant left standing for a waiter that had
// gone costs a TTL (1 s), a free lock nobody was told of a renew interval
// (333 ms); a handoff costs milliseconds.
const stallLimit = ttl / 2

// A handoff racing the waiter's end, both ways a waiter ends:
//   - three in-process waiters, whose traffic from Redis is delayed by
//     20 to 60 ms, give up each Acquire after 20 to 600 ms (a
//     turn in the queue takes about 300 ms), so
//     their exit (which must end a grant made to them and hand it on) races
//     the release that grants them;
//   - a waiter process is stopped (SIGSTOP) while it waits, for 0.85 to 2
//     TTLs, across the expiry of its place in the queue (its liveness key
//     lives a TTL from its last request): a grant made to it before that
//     expiry reaches it only after it resumes, when it must count validity
//     from its queue request's send time, not from the message, or it would
//     still act after its key expired and the next holder got the lock.
//
// The checkers: token order, ledger, no overlap of Valid() intervals beyond
// the margin, and no stall of the lock beyond stallLimit outside the pauses.
func TestHandoffRacesWaiterExpiry(t *testing.T) {
	r := startRun(t, redistest.None)
	for i := range 3 {
		// Their replies and grant messages come 20 to 60 ms late: a grant
		// made to them is often still on its way when they give up.
		px := redistest.StartProxy(t, r.srv.Addr())
		px.DelayRx(40*time.Millisecond, 20*time.Millisecond)
		r.proxies = append(r.proxies, px)
		r.addWorker(px.Addr(), fmt.Sprintf("q%d", i), func() time.Duration {
			return time.Duration(20+rand.IntN(580)) * time.Millisecond
		})
	}
	ch := startChild(t, r)
	time.Sleep(phase) // contention and give-ups first
	var paused [][2]int64
	for _, d := range []time.Duration{ttl - 150*time.Millisecond, ttl, ttl + 150*time.Millisecond, 2 * ttl} {
		<-drain(ch.asking)
		time.Sleep(30 * time.Millisecond) // its queue request is in
		if err := syscall.Kill(ch.pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		from := mono()
		time.Sleep(d)
		if err := syscall.Kill(ch.pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		// A grant made to it just before it resumed holds the lock for up
		// to a TTL after that.
		paused = append(paused, [2]int64{from, mono() + int64(ttl+margin)})
		time.Sleep(phase / 2)
	}
	time.Sleep(phase / 2)
	ch.finish()
	h, _ := r.stop()
	for _, s := range stalls(h, paused, stallLimit) {
		t.Errorf("violation: %s", s)
	}
	by := map[string]int{}
	for _, g := range h.grants {
		by[g.holder[:1]]++
	}
	t.Logf("grants: %d to the patient workers, %d to the waiters that give up, %d to the paused process",
		by["w"], by["q"], by["c"])
	if by["q"] == 0 {
		t.Error("no grant reached a waiter that gives up: the race was not exercised")
	}
}
