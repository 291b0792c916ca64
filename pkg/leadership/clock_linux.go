//go:build linux

package leadership

import (
	"time"

	"golang.org/x/sys/unix"
)

// hasBoottime is decided once, so that the elector never mixes two clocks. CLOCK_BOOTTIME
// exists since Linux 2.6.39; older kernels get Go's monotonic clock.
var hasBoottime = func() bool {
	var ts unix.Timespec
	return unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) == nil
}()

// fallbackStart anchors the fallback clock.
var fallbackStart = time.Now()

// now reads CLOCK_BOOTTIME.
func now() instant {
	if !hasBoottime {
		return instant(time.Since(fallbackStart))
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// The clock answered at start-up; the kernel does not take it back.
		panic("leadership: CLOCK_BOOTTIME stopped working: " + err.Error())
	}
	return instant(ts.Nano())
}
