package controllers_test

import (
	"time"

	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
)

// eventually and consistently poll a condition (controllertest.Eventually, Consistently).
var (
	eventually   = controllertest.Eventually
	consistently = controllertest.Consistently
)

// secondApart waits until the clock has moved past the next whole second: the API server
// records creation and Ready transition times with one-second resolution, and the tests of
// OldestReady and FirstReady need two pods' times to differ. It waits for time to pass,
// not for a condition, so it is not an eventually.
func secondApart() { time.Sleep(1100 * time.Millisecond) }
