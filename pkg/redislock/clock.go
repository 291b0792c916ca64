package redislock

import "time"

// instant is a reading of the package's monotonic clock in nanoseconds. On
// Linux it is CLOCK_BOOTTIME, which keeps counting while the machine is
// suspended: a lease held across a suspend must look expired afterwards, and
// Go's timers (CLOCK_MONOTONIC) do not see the time spent suspended. Only
// differences of instants mean anything; they are never compared with another
// machine's clock.
type instant int64

// add returns the instant d after i.
func (i instant) add(d time.Duration) instant { return i + instant(d) }

// sub returns the duration from j to i.
func (i instant) sub(j instant) time.Duration { return time.Duration(i - j) }

// wall projects i onto the wall clock as seen now: the returned time.Time
// carries a monotonic reading, so comparing it with time.Now() measures the
// same interval the package measures (up to time spent suspended after now).
func (i instant) wall() time.Time {
	return time.Now().Add(i.sub(now()))
}

// minInstant returns the earlier of a and b.
func minInstant(a, b instant) instant {
	if a < b {
		return a
	}
	return b
}
