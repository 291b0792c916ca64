package redislock

import "github.com/lockwarden/lockwarden/pkg/clock"

// instant is a reading of the package's clock, pkg/clock: CLOCK_BOOTTIME on Linux, so that time
// spent suspended counts (Go's timers do not see it). Only differences of instants mean
// anything; they are never compared with another machine's clock.
type instant = clock.Instant

// now reads the clock.
func now() instant { return clock.Now() }

// sendTime is clock.Fast: never later than now at the same moment, without a system call; the
// clock of send times and timers, where an earlier reading only shortens a validity or fires a
// renewal sooner. Validity itself is checked with now.
func sendTime() instant { return clock.Fast() }
