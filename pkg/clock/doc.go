// Package clock is the monotonic clock that lockwarden's validity decisions read: on Linux
// CLOCK_BOOTTIME, which keeps counting while the machine is suspended, so that a lease held
// across a suspend looks expired afterwards (Go's timers run on CLOCK_MONOTONIC and fire late
// after a suspend; they do not see that time). Elsewhere, and on Linux kernels without
// CLOCK_BOOTTIME (before 2.6.39), it is Go's monotonic clock, which may not count a suspend.
// The choice is made once per process, so that one process never mixes two clocks.
//
// Now is the clock validity is checked with. Fast is a cheaper reading (no system call) that
// is never later than Now at the same moment, for send times and timers.
//
// An Instant means something only relative to another Instant of the same process: it is never
// compared with another process's or another machine's clock.
//
// The package imports only the standard library and golang.org/x/sys/unix, so that pkg/lease,
// pkg/fence and pkg/redislock may use it within their import boundaries.
package clock
