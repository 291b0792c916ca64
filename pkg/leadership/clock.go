package leadership

import "github.com/lockwarden/lockwarden/pkg/clock"

// instant is a reading of the elector's clock, pkg/clock: CLOCK_BOOTTIME on Linux, so that time
// spent suspended counts (Go's timers do not see it). Only differences of instants mean
// anything; they are never compared with another machine's clock.
type instant = clock.Instant

// now reads the clock.
func now() instant { return clock.Now() }
