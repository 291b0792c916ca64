//go:build !linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os/exec"
	"syscall"
)

// guardEnv is unused off Linux: there is no parent-death signal, and cmd runs without a guard.
const guardEnv = "LOCKWARDEN_AGENT_GUARD"

// The guard's requests (guard_linux.go): never sent off Linux, where cmd has no guard.
const (
	guardTermEscaped = syscall.SIGUSR1
	guardKillAll     = syscall.SIGUSR2
)

// runGuard is not used off Linux.
func runGuard(_, _ []string) int { return exitAgent }

// startChild starts argv with env in a new process group, stdin from /dev/null. Off Linux
// there is no parent-death signal: a child outlives an agent killed by SIGKILL.
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
	done := make(chan struct{})
	c := &child{cmd: cmd, pgid: cmd.Process.Pid, exited: done, guardDone: done}
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
		close(done)
	}()
	return c, nil
}
