package main

import (
	"errors"
	"fmt"
	"io"
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

// child is cmd running in a process group of its own (its PID is the group's ID).
type child struct {
	cmd    *exec.Cmd
	pgid   int
	exited chan struct{} // closed once cmd.Wait has returned
	state  *syscall.WaitStatus
	err    error // from cmd.Wait, when not an exit status
}

// startChild starts argv with env in a new process group, stdin from /dev/null.
func startChild(argv, env []string, stdout, stderr io.Writer) (*child, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, fmt.Errorf("start %s: %w", argv[0], errCmdNotFound)
		}
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.ENOEXEC) {
			return nil, fmt.Errorf("start %s: %w: %w", argv[0], errCmdNotExecutable, err)
		}
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	c := &child{cmd: cmd, pgid: cmd.Process.Pid, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		if ps := cmd.ProcessState; ps != nil {
			if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
				c.state = &ws
			}
		}
		if c.state == nil {
			c.err = err
		}
		close(c.exited)
	}()
	return c, nil
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

// gone reports whether the child has been reaped and no process is left in its group. A
// member the agent inherited (the agent is PID 1 of its container, or a subreaper) is reaped
// here; one that left the group (setsid, setpgid) is not tracked.
func (c *child) gone() bool {
	select {
	case <-c.exited:
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

// stop sends SIGTERM to the group, and SIGKILL at killAt if any member is left then; it
// returns only once the child is reaped and its group is empty, sending SIGKILL again every
// second, and calls stuck once when members are left a second after the first SIGKILL (a
// process in uninterruptible sleep dies when it leaves it). Returning means nothing of the
// group runs any more, which is what a release promises.
func (c *child) stop(killAt time.Time, stuck func(error)) error {
	err := c.signal(syscall.SIGTERM)
	if c.waitGone(killAt) {
		return err
	}
	err = errors.Join(err, c.signal(syscall.SIGKILL))
	for warned := false; !c.waitGone(time.Now().Add(time.Second)); warned = true {
		if !warned {
			stuck(fmt.Errorf("process group %d: members left a second after SIGKILL", c.pgid))
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
