package main

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// groupPoll is how often a stopping child's process group is checked for members left.
	groupPoll = 5 * time.Millisecond
	// killLead is how long before ValidUntil SIGKILL goes out at the latest, so that the kernel
	// has ended the group by ValidUntil.
	killLead = 250 * time.Millisecond
)

// child is cmd running in a process group of its own (its PID is the group's ID), started
// through a guard on Linux (guard_linux.go).
type child struct {
	cmd    *exec.Cmd // the guard (Linux), or cmd itself
	pgid   int
	exited chan struct{} // closed once cmd has exited (the guard reported it, or ended)
	state  *syscall.WaitStatus
	err    error // when cmd's exit status is unknown
	// guardDone is closed once the guard has exited: it waits until cmd's group is empty and
	// no descendant of cmd is left. Off Linux, where cmd has no guard, it is exited.
	guardDone chan struct{}
	// guarded: cmd runs under a guard (Linux), which takes the stop's requests
	// (guardTermEscaped, guardKillAll).
	guarded bool
}

// pid is the child's process ID.
func (c *child) pid() int { return c.pgid }

// signal sends sig to the child's whole process group.
func (c *child) signal(sig syscall.Signal) error {
	if err := unix.Kill(-c.pgid, sig); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal process group %d with %v: %w", c.pgid, sig, err)
	}
	return nil
}

// tellGuard sends the guard one of the stop's requests; nothing without a guard, or once the
// guard has exited (os.Process signals through a pidfd: never another process).
func (c *child) tellGuard(sig syscall.Signal) {
	if c.guarded {
		_ = c.cmd.Process.Signal(sig)
	}
}

// accounted reports, once gone, whether the guard ended by its own rule: it exited 0 after
// cmd's group was empty and no descendant of cmd was left. A guard killed by someone (the OOM
// killer, a stray signal) may leave descendants that left the group: nothing then vouches that
// the work stopped. Without a guard (off Linux) the group is all that is known.
func (c *child) accounted() bool {
	if !c.guarded {
		return true
	}
	ps := c.cmd.ProcessState
	return ps != nil && ps.Success()
}

// gone reports whether the child has been reaped, no process is left in its group, and (on
// Linux) the guard has exited, which it does only once no descendant of cmd is left (processes
// that left the group included, guard_linux.go). A member the agent inherited after the guard
// ended (the agent is PID 1 of its container, or a subreaper) is reaped here.
func (c *child) gone() bool {
	select {
	case <-c.exited:
	default:
		return false
	}
	select {
	case <-c.guardDone:
	default:
		return false
	}
	for {
		// Only after cmd.Wait returned: before, this could take the child's own status.
		pid, err := unix.Wait4(-c.pgid, nil, unix.WNOHANG, nil)
		if err != nil || pid <= 0 {
			break
		}
	}
	return errors.Is(unix.Kill(-c.pgid, 0), unix.ESRCH)
}

// stop sends SIGTERM to the group and (through the guard) to every descendant of cmd that
// left it, and SIGKILL to all of them at killAt if anything is left then; it returns only once
// the child is reaped, its group is empty and the guard has exited (no descendant left),
// sending SIGKILL to the group again every second, and calls stuck once when something is left
// a second after the first SIGKILL (a process in uninterruptible sleep dies when it leaves
// it). Returning means nothing cmd started runs any more, which is what a release promises
// (if accounted: see there).
func (c *child) stop(killAt time.Time, stuck func(error)) error {
	err := c.signal(syscall.SIGTERM)
	c.tellGuard(guardTermEscaped)
	if c.waitGone(killAt) {
		return err
	}
	err = errors.Join(err, c.signal(syscall.SIGKILL))
	c.tellGuard(guardKillAll)
	for warned := false; !c.waitGone(time.Now().Add(time.Second)); warned = true {
		if !warned {
			stuck(fmt.Errorf("process group %d: members or descendants left a second after SIGKILL", c.pgid))
		}
		_ = c.signal(syscall.SIGKILL)
	}
	return err
}

// waitGone waits until gone or deadline; it reports gone.
func (c *child) waitGone(deadline time.Time) bool {
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	exited := c.exited
	for !c.gone() {
		select {
		case <-exited:
			exited = nil // closed: from now on the ticker paces the checks
		case <-tick.C:
		case <-timeout.C:
			return c.gone()
		}
	}
	return true
}

// exitCode is the agent's exit code for a child that exited by itself: its status, or 128+n
// for a child killed by signal n.
func exitCode(ws *syscall.WaitStatus) int {
	switch {
	case ws == nil:
		return exitAgent
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		return exitSignalShift + int(ws.Signal())
	}
	return exitAgent
}
