package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/lockwarden/lockwarden/test/chaos"
)

// proc is a child process; its output is appended to dir/<name>.log. Every proc is waited
// for by its own goroutine, which closes exited.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{}
	err    error
	// exitedAt is when Wait returned (CLOCK_MONOTONIC ns); read it only after exited.
	exitedAt int64
	// startedAt is when Start returned (CLOCK_MONOTONIC ns).
	startedAt int64
}

func startProc(dir, name, bin string, env []string, args ...string) (*proc, error) {
	log, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	// Its own process group: a Ctrl-C of the harness reaches the harness only, which then
	// stops every child in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, exited: make(chan struct{}), startedAt: chaos.Mono()}
	go func() {
		p.err = cmd.Wait()
		p.exitedAt = chaos.Mono()
		_ = p.log.Close()
		close(p.exited)
	}()
	return p, nil
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signal sends sig unless the process has exited.
func (p *proc) signal(sig syscall.Signal) {
	if p.running() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill sends SIGKILL (which ends a stopped process too) and waits for the exit.
func (p *proc) kill() {
	p.signal(syscall.SIGKILL)
	<-p.exited
}

// stop sends SIGCONT and SIGTERM, waits up to grace, then kills; it always waits.
func (p *proc) stop(grace time.Duration) {
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.kill()
	}
}

// exitCode is the exit status once exited (-1 for a signal).
func (p *proc) exitCode() int {
	<-p.exited
	return p.cmd.ProcessState.ExitCode()
}
