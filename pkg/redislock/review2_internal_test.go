package redislock

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/redistest"
)

// Review 2, finding 5 (a race, reported if hit). grab tracks the Lock (so
// Close will release it) before startWatchdog sets l.start. A Close whose
// Release runs in between finds l.start nil, so finish does not uncount
// the watchdog; the watchdog timer is then set anyway and only uncounts at
// RenewInterval. TryAcquire returns (Lock, nil) for a lock Close already
// released, and Close waits up to RenewInterval (or fails on a shorter
// ctx) for a goroutine that has nothing to do.
func TestReview2CloseRacesGrab(t *testing.T) {
	srv := redistest.Start(t, redistest.Config{})
	rdb := srv.Client(t)
	cfg := Config{TTL: 6 * time.Second} // RenewInterval 2 s
	hits := 0
	for i := range 300 {
		c, err := New(rdb, cfg)
		if err != nil {
			t.Fatal(err)
		}
		key := "race-" + strconv.Itoa(i)
		var wg sync.WaitGroup
		var l *Lock
		var aerr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, aerr = c.TryAcquire(context.Background(), key, "a")
		}()
		time.Sleep(time.Duration(i%40) * 20 * time.Microsecond)
		cctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		start := time.Now()
		cerr := c.Close(cctx)
		took := time.Since(start)
		cancel()
		wg.Wait()
		if aerr == nil && l.Err() != nil && (cerr != nil || took > 100*time.Millisecond) {
			hits++
			t.Logf("iteration %d: TryAcquire = Lock (err nil) already ended by Close (%v); Close took %v, returned %v",
				i, l.Err(), took, cerr)
			if cerr != nil {
				t.Errorf("iteration %d: Close = %v although every lock was released: it waited for a watchdog timer set after the release", i, cerr)
			}
		}
		_ = c.Close(context.Background())
	}
	t.Logf("%d of 300 iterations hit the window", hits)
}
