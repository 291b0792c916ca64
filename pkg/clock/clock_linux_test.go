//go:build linux

package clock

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestNowIsBoottime: on this machine CLOCK_BOOTTIME answers, and Now reads it (a reading taken
// between two direct reads of CLOCK_BOOTTIME lies between them).
func TestNowIsBoottime(t *testing.T) {
	if !hasBoottime {
		t.Fatal("CLOCK_BOOTTIME is not available on this kernel; Now falls back to Go's monotonic clock")
	}
	boottime := func() Instant {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
			t.Fatalf("clock_gettime(CLOCK_BOOTTIME): %v", err)
		}
		return Instant(ts.Nano())
	}
	before := boottime()
	got := Now()
	after := boottime()
	if got < before || got > after {
		t.Errorf("Now() = %d, want between CLOCK_BOOTTIME readings %d and %d", got, before, after)
	}
}
