//go:build !linux

package clock

import "time"

// start anchors the clock: off Linux it is Go's monotonic clock, which may not count time
// spent suspended (see the package comment).
var start = time.Now()

// Now reads Go's monotonic clock as an offset from process start.
func Now() Instant { return Instant(time.Since(start)) }

// Fast is Now: off Linux there is one clock.
func Fast() Instant { return Now() }
