//go:build !linux

package redislock

import "time"

// start anchors the clock: off Linux the engine uses Go's monotonic clock,
// which may not count time spent suspended (see doc.go).
var start = time.Now()

// now reads Go's monotonic clock as an offset from process start.
func now() instant { return instant(time.Since(start)) }
