package chaos

import "golang.org/x/sys/unix"

// Mono reads CLOCK_MONOTONIC in nanoseconds: one clock for every process of the machine, so
// the harness can compare intervals that different workers recorded (Go's own monotonic
// readings are relative to each process).
func Mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("chaos: CLOCK_MONOTONIC: " + err.Error())
	}
	return ts.Nano()
}
