//go:build linux

package redislock

import (
	"time"

	"golang.org/x/sys/unix"
)

// hasBoottime is decided once, so that the engine never mixes two clocks.
// CLOCK_BOOTTIME exists since Linux 2.6.39; older kernels get the fallback.
var hasBoottime = func() bool {
	var ts unix.Timespec
	return unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) == nil
}()

// fallbackStart anchors the fallback clock (Go's monotonic clock).
var fallbackStart = time.Now()

// now reads CLOCK_BOOTTIME.
func now() instant {
	if !hasBoottime {
		return instant(time.Since(fallbackStart))
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// The clock answered at start-up; the kernel does not take it back.
		panic("redislock: CLOCK_BOOTTIME stopped working: " + err.Error())
	}
	return instant(ts.Nano())
}
