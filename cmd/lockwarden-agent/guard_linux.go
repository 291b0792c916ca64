package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The child's guard. A child the agent started must not outlive the agent: outside a
// container (or under a wrapper that is PID 1) nothing else stops it when the agent is
// SIGKILLed, and it would go on writing under a term nobody confirms any more. A parent-death
// signal reaches only the direct child, not its process group, so the agent starts cmd
// through a guard: this binary again, with guardEnv set, which
//
//   - has the agent's death as its parent-death signal (SIGTERM), and is a subreaper, so
//     that the group's orphans become its children;
//   - starts cmd in a process group of its own, with SIGKILL as cmd's parent-death signal
//     (if the guard itself is killed, cmd dies with it);
//   - reports cmd's PID (the group's ID) and, once cmd exits, its wait status to the agent on
//     file descriptor 3 (closed on exec, so that cmd cannot write to it and forge an exit),
//     then exits only once nothing cmd started is left: the group is empty AND the guard has
//     no child left (wait4 answers ECHILD). A process that left the group (setsid, setpgid:
//     a daemon, a forked server) is still a descendant, and becomes the guard's child when
//     its parent exits, because the guard is a subreaper: so the guard's exit means every
//     descendant of cmd has exited, which is what the agent's release promises;
//   - on the agent's stop: SIGUSR1 makes it send SIGTERM to every descendant outside the
//     group (the agent signals the group itself), and SIGUSR2, after the grace, makes it
//     SIGKILL the group and every descendant, again every poll, until none is left;
//   - on its parent-death signal (or SIGINT, SIGHUP, SIGTERM from anyone) SIGKILLs the group
//     and every descendant, reaps them, and exits with 128+9 (the agent then cannot vouch
//     that nothing is left: it abandons the term instead of releasing it).
//
// Go's parent-death signal is tied to the OS thread that started the process: the goroutine
// that starts the guard (and the guard's goroutine that starts cmd) stays locked to its thread
// until that process has exited, so that no thread exit fires it early.

// guardEnv marks a process started as a guard; the guard removes it from cmd's environment.
const guardEnv = "LOCKWARDEN_AGENT_GUARD"

// guardStartTimeout bounds the wait for the guard's report that cmd started.
const guardStartTimeout = 10 * time.Second

// startChild starts argv with env through a guard, in a process group of its own, stdin from
// /dev/null.
func startChild(argv, env []string, stdout, stderr io.Writer) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("start %s: find the agent's own binary for the guard: %w", argv[0], err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	owned := false // follow owns r once cmd started
	defer func() {
		if !owned {
			_ = r.Close()
		}
	}()
	g := exec.Command(self, argv...)
	g.Args[0] = "lockwarden-agent-guard"
	g.Env = append(append([]string(nil), env...), guardEnv+"=1")
	g.Stdout, g.Stderr = stdout, stderr
	g.ExtraFiles = []*os.File{w}
	g.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	c := &child{cmd: g, exited: make(chan struct{}), guardDone: make(chan struct{}), guarded: true}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the guard's parent-death signal follows this thread
		defer runtime.UnlockOSThread()
		if err := g.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = g.Wait()
		close(c.guardDone)
	}()
	err = <-started
	_ = w.Close() // the guard holds the write end now: EOF when it exits
	if err != nil {
		return nil, fmt.Errorf("start the guard of %s: %w", argv[0], err)
	}
	lines := bufio.NewScanner(r)
	first := make(chan string, 1)
	go func() {
		if lines.Scan() {
			first <- lines.Text()
		}
		close(first)
	}()
	var line string
	select {
	case line = <-first:
	case <-time.After(guardStartTimeout):
		_ = g.Process.Kill()
		<-c.guardDone
		return nil, fmt.Errorf("start %s: the guard reported nothing within %v", argv[0], guardStartTimeout)
	}
	kind, rest, _ := strings.Cut(line, " ")
	if kind != "pid" {
		<-c.guardDone
		return nil, guardStartError(argv[0], line)
	}
	if c.pgid, err = strconv.Atoi(rest); err != nil || c.pgid <= 1 {
		_ = g.Process.Kill()
		<-c.guardDone
		return nil, fmt.Errorf("start %s: the guard reported %q", argv[0], line)
	}
	owned = true
	go c.follow(lines, r)
	return c, nil
}

// follow reads the guard's report of cmd's exit; c.exited closes then, or when the guard
// ended without one (cmd died with it).
func (c *child) follow(lines *bufio.Scanner, r *os.File) {
	defer r.Close()
	defer close(c.exited)
	for lines.Scan() {
		if kind, rest, _ := strings.Cut(lines.Text(), " "); kind == "exit" {
			if n, err := strconv.ParseUint(rest, 10, 32); err == nil {
				ws := syscall.WaitStatus(n)
				c.state = &ws
				return
			}
		}
	}
	<-c.guardDone
	c.err = fmt.Errorf("the guard of process group %d ended without reporting its exit", c.pgid)
}

// guardStartError is the error for a guard's "error KIND MESSAGE" line.
func guardStartError(cmd, line string) error {
	_, rest, _ := strings.Cut(line, " ")
	kind, msg, _ := strings.Cut(rest, " ")
	switch kind {
	case "notfound":
		return fmt.Errorf("start %s: %w: %s", cmd, errCmdNotFound, msg)
	case "notexec":
		return fmt.Errorf("start %s: %w: %s", cmd, errCmdNotExecutable, msg)
	}
	return fmt.Errorf("start %s: %s", cmd, rest)
}

// The agent's requests to the guard of a child it stops.
const (
	guardTermEscaped = syscall.SIGUSR1 // SIGTERM to the descendants outside the group
	guardKillAll     = syscall.SIGUSR2 // SIGKILL the group and every descendant until none is left
)

// runGuard is the guard process: it runs argv (see above) and returns its own exit code.
func runGuard(argv, environ []string) int {
	report := os.NewFile(3, "report")
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	requests := make(chan os.Signal, 4)
	signal.Notify(requests, guardTermEscaped, guardKillAll)
	if err := becomeSubreaper(); err != nil {
		fmt.Fprintf(report, "error start %v\n", err)
		return exitAgent
	}
	if len(argv) == 0 {
		fmt.Fprintln(report, "error start no command")
		return exitAgent
	}
	// cmd must not inherit the report: a line it wrote there would pass for the guard's.
	syscall.CloseOnExec(int(report.Fd()))
	runtime.LockOSThread() // cmd's parent-death signal follows this thread: never unlocked
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = withoutEnv(environ, guardEnv)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		switch {
		case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
			fmt.Fprintf(report, "error notfound %v\n", err)
			return exitNotFound
		case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.ENOEXEC):
			fmt.Fprintf(report, "error notexec %v\n", err)
			return exitNotExec
		}
		fmt.Fprintf(report, "error start %v\n", err)
		return exitAgent
	}
	pgid := cmd.Process.Pid
	fmt.Fprintf(report, "pid %d\n", pgid)
	waited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(waited)
	}()
	tick := time.NewTicker(groupPoll)
	defer tick.Stop()
	exited, killing := false, false
	for {
		select {
		case <-signals:
			// The agent died (or someone stops the guard): nothing supervises cmd's group any
			// more, and its term may have ended: stop everything now.
			killAll(pgid)
			return exitSignalShift + int(syscall.SIGKILL)
		case sig := <-requests:
			if sig == guardKillAll {
				killing = true
			} else {
				termEscaped(pgid)
			}
		case <-waited:
			waited, exited = nil, true
			ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
			fmt.Fprintf(report, "exit %d\n", uint32(ws))
		case <-tick.C:
		}
		if killing {
			killOnce(pgid)
		}
		// Only after cmd.Wait returned: before, reaping could take cmd's own status.
		if exited && reapAll() && errors.Is(unix.Kill(-pgid, 0), unix.ESRCH) {
			return exitOK
		}
	}
}

// termEscaped sends SIGTERM to every descendant of this process outside group pgid.
func termEscaped(pgid int) {
	for _, p := range descendantsOf(os.Getpid()) {
		if p.pgrp != pgid {
			_ = unix.Kill(p.pid, unix.SIGTERM)
		}
	}
}

// killOnce SIGKILLs group pgid and every descendant of this process.
func killOnce(pgid int) {
	_ = unix.Kill(-pgid, unix.SIGKILL)
	for _, p := range descendantsOf(os.Getpid()) {
		_ = unix.Kill(p.pid, unix.SIGKILL)
	}
}

// killAll SIGKILLs group pgid and every descendant of this process (the group's orphans, and
// any that left the group), and reaps them, until none is left or a few seconds have passed.
func killAll(pgid int) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(groupPoll) {
		killOnce(pgid)
		if reapAll() && errors.Is(unix.Kill(-pgid, 0), unix.ESRCH) {
			return
		}
	}
}

// reapAll reaps every exited child; it reports whether no child is left.
func reapAll() bool {
	for {
		pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.ECHILD):
			return true
		case err != nil || pid <= 0:
			return false
		}
	}
}

// proc is one process as /proc shows it.
type proc struct{ pid, ppid, pgrp int }

// descendantsOf lists the processes below pid (children, their children, ...), from /proc.
// A process that forks while the list is read may be missed: callers repeat.
func descendantsOf(pid int) []proc {
	children := map[int][]proc{}
	for _, p := range procs() {
		children[p.ppid] = append(children[p.ppid], p)
	}
	var out []proc
	for next := []int{pid}; len(next) > 0; {
		var below []int
		for _, parent := range next {
			for _, c := range children[parent] {
				out = append(out, c)
				below = append(below, c.pid)
			}
		}
		next = below
	}
	return out
}

// procs lists every process /proc shows, with its parent and process group.
func procs() []proc {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []proc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		if p, ok := parseStat(pid, string(b)); ok {
			out = append(out, p)
		}
	}
	return out
}

// parseStat reads the parent and process group from a /proc/PID/stat line: "pid (comm) state
// ppid pgrp ...", where comm may hold spaces and parentheses, so it parses after the last ')'.
func parseStat(pid int, s string) (proc, bool) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return proc{}, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return proc{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgrp, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return proc{}, false
	}
	return proc{pid: pid, ppid: ppid, pgrp: pgrp}, true
}

// withoutEnv is environ without key.
func withoutEnv(environ []string, key string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if k, _, _ := strings.Cut(kv, "="); k != key {
			out = append(out, kv)
		}
	}
	return out
}
