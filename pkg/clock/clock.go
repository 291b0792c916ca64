package clock

import "time"

// Instant is a reading of the clock in nanoseconds (see the package comment). Only differences
// of Instants mean anything.
type Instant int64

// Add returns the Instant d after i.
func (i Instant) Add(d time.Duration) Instant { return i + Instant(d) }

// Sub returns the duration from j to i.
func (i Instant) Sub(j Instant) time.Duration { return time.Duration(i - j) }

// Wall projects i onto the wall clock as seen now. The result carries Go's monotonic reading,
// so comparing it with time.Now() measures the interval the clock measures (up to time spent
// suspended after now).
func (i Instant) Wall() time.Time { return time.Now().Add(i.Sub(Now())) }
