package main

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// becomeSubreaper makes the agent the reaper of its descendants orphaned by the child's exit,
// so a stop sees the child's whole group end (child.gone) even when the agent is not PID 1.
func becomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become child subreaper: %w", err)
	}
	return nil
}
