//go:build linux

package clock

import (
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// hasBoottime is decided once, so that a process never mixes two clocks. CLOCK_BOOTTIME exists
// since Linux 2.6.39; older kernels get Go's monotonic clock.
var hasBoottime = func() bool {
	var ts unix.Timespec
	return unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) == nil
}()

// fallbackStart anchors the fallback clock.
var fallbackStart = time.Now()

// monoBase anchors Go's monotonic clock (CLOCK_MONOTONIC, read through the vDSO: no system
// call) for Fast.
var monoBase = time.Now()

// bootOffset is the largest measured CLOCK_BOOTTIME - CLOCK_MONOTONIC (as time since
// monoBase), in ns. The two clocks run at the same rate and differ by the time the machine
// spent suspended, which only grows; each measurement reads CLOCK_MONOTONIC after
// CLOCK_BOOTTIME, so it is never above the true offset at any later moment.
var bootOffset atomic.Int64

func init() {
	if hasBoottime {
		Now()
	}
}

// Now reads CLOCK_BOOTTIME (a system call: x/sys/unix does not use the vDSO) and records the
// offset that Fast adds.
func Now() Instant {
	if !hasBoottime {
		return Instant(time.Since(fallbackStart))
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		// The clock answered at start-up; the kernel does not take it back.
		panic("clock: CLOCK_BOOTTIME stopped working: " + err.Error())
	}
	bt := ts.Nano()
	off := bt - int64(time.Since(monoBase))
	for {
		old := bootOffset.Load()
		if off <= old || bootOffset.CompareAndSwap(old, off) {
			break
		}
	}
	return Instant(bt)
}

// Fast returns a reading that is never later than what Now would return at the same moment,
// without a system call: CLOCK_MONOTONIC plus the largest offset Now has measured. Only a
// suspend since the last Now call makes it lag, and then by the time suspended. It is a clock
// for send times and timers, where an earlier reading only shortens a validity or fires a
// renewal sooner; validity itself is checked with Now.
func Fast() Instant {
	if !hasBoottime {
		return Now()
	}
	return Instant(int64(time.Since(monoBase)) + bootOffset.Load())
}
