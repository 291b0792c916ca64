package leadership

import "time"

// instant is a reading of the elector's clock in nanoseconds: CLOCK_BOOTTIME on Linux, which
// keeps counting while the machine is suspended, so a term confirmed before a suspend looks
// expired after it even though Go's timers (CLOCK_MONOTONIC) fire late. Only differences of
// instants mean anything; they are never compared with another machine's clock.
type instant int64

// add returns the instant d after i.
func (i instant) add(d time.Duration) instant { return i + instant(d) }

// sub returns the duration from j to i.
func (i instant) sub(j instant) time.Duration { return time.Duration(i - j) }

// wall projects i onto the wall clock as seen now. The result carries a monotonic reading, so
// comparing it with time.Now() measures the interval the elector measures (up to time spent
// suspended after now).
func (i instant) wall() time.Time { return time.Now().Add(i.sub(now())) }
