//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What the restart evidence (TestRestartEvidence) reads on the host: a container's cgroup in
// every v1 hierarchy, its processes by role, and whether each is still alive.

// cgroupDir is a container's cgroup in one hierarchy.
type cgroupDir struct {
	Hierarchy string // as /proc/<pid>/cgroup names it: "memory", "name=systemd", "" (unified)
	Dir       string // its folder under /sys/fs/cgroup
}

// containerCgroups are the cgroups of the process pid that belong to the container id: the
// kubelet's cgroupfs driver names a container's cgroup after its ID (.../pod<uid>/<id>), so
// a hierarchy whose path does not end in it is not the container's own (it is recorded
// nowhere and checked nowhere).
func containerCgroups(pid int, id string) ([]cgroupDir, error) {
	mounts, err := cgroupMounts()
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, fmt.Errorf("read the cgroups of pid %d: %w", pid, err)
	}
	var out []cgroupDir
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 || filepath.Base(f[2]) != id {
			continue
		}
		mp, ok := mounts[f[1]]
		if !ok {
			return nil, fmt.Errorf("pid %d is in hierarchy %q, which is not mounted here", pid, f[1])
		}
		out = append(out, cgroupDir{Hierarchy: f[1], Dir: filepath.Join(mp, f[2])})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pid %d is in no cgroup named after container %s:\n%s", pid, id, b)
	}
	return out, nil
}

// cgroupMounts maps each mounted hierarchy, named as in /proc/<pid>/cgroup, to its mountpoint.
func cgroupMounts() (map[string]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 3 {
			continue
		}
		switch tail[0] {
		case "cgroup2":
			out[""] = fields[4]
		case "cgroup":
			var names []string
			for _, o := range strings.Split(tail[2], ",") {
				if o != "rw" && o != "ro" && !strings.HasPrefix(o, "release_agent") && o != "clone_children" && o != "noprefix" && o != "xattr" {
					names = append(names, o)
				}
			}
			out[strings.Join(names, ",")] = fields[4]
		}
	}
	return out, sc.Err()
}

// cgroupProcs lists the PIDs in a cgroup; gone when its folder no longer exists (the
// runtime removed it, which it can only do once the cgroup is empty).
func cgroupProcs(dir string) (pids []int, gone bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if os.IsNotExist(err) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	for _, s := range strings.Fields(string(b)) {
		if p, err := strconv.Atoi(s); err == nil {
			pids = append(pids, p)
		}
	}
	return pids, false, nil
}

// proc is one process as read from /proc before the kill.
type proc struct {
	Role  string // crashee's mode (its first argument), or the program's name
	PID   int
	PPID  int
	SID   int
	State string // one letter: S, R, T, Z, ...
	Flags uint64 // the kernel's PF_* flags of the thread-group leader
	Start uint64 // start time in clock ticks since boot: tells a reused PID apart
}

// readProc reads /proc/<pid>/stat and cmdline; false when the process is gone.
func readProc(pid int) (proc, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return proc{}, false
	}
	// pid (comm) state ppid pgrp session ... starttime is field 22
	i := bytes.LastIndexByte(stat, ')')
	f := strings.Fields(string(stat[i+1:]))
	if i < 0 || len(f) < 20 {
		return proc{}, false
	}
	p := proc{PID: pid, State: f[0]}
	p.PPID, _ = strconv.Atoi(f[1])
	p.SID, _ = strconv.Atoi(f[3])
	p.Flags, _ = strconv.ParseUint(f[6], 10, 64)
	p.Start, _ = strconv.ParseUint(f[19], 10, 64)
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	switch {
	case len(args) > 1 && filepath.Base(args[0]) == "crashee":
		p.Role = args[1]
	case len(args) > 0:
		p.Role = filepath.Base(args[0])
	}
	return p, true
}

// state is what has become of p: "gone" (reaped: no such process, or its PID reused),
// "zombie" (every thread exited, not reaped), or "alive(<state>)", with ",killed" when SIGKILL
// is pending or the process is already exiting (either way it runs no more user code).
// "alive(<n> threads exiting,killed)" is a process whose thread-group leader exited while n
// threads have not: a Go process's leader is often not its last thread, and the last thread
// of a PID namespace's init waits in the kernel until every other process of the namespace
// is gone.
func (p proc) state() string {
	// pending first, then the flags: a SIGKILL pending when this read began is either
	// still pending or already taken, and then the flags show PF_EXITING
	pending := killPending(p.PID)
	now, ok := readProc(p.PID)
	switch {
	case !ok || now.Start != p.Start:
		return "gone"
	case now.State == "Z" || now.State == "X":
		if n := liveThreads(p.PID); n > 0 {
			// crashee's threads exit together (a Go program exits as a group)
			return fmt.Sprintf("alive(%d threads exiting,killed)", n)
		}
		return "zombie"
	case pending || now.Flags&pfExiting != 0:
		return "alive(" + now.State + ",killed)"
	}
	return "alive(" + now.State + ")"
}

// pfExiting is PF_EXITING (include/linux/sched.h): the task is in do_exit.
const pfExiting = 0x4

// killPending reports whether SIGKILL is pending for pid (its leader's or the process's set):
// a process killed but not yet scheduled to die, which runs no more user code.
func killPending(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || (k != "SigPnd" && k != "ShdPnd") {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&(1<<(uint(syscall.SIGKILL)-1)) != 0 {
			return true
		}
	}
	return false
}

// liveThreads counts the threads of pid that have not exited.
func liveThreads(pid int) int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/[0-9]*", pid))
	n := 0
	for _, task := range tasks {
		stat, err := os.ReadFile(task + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		if f := strings.Fields(string(stat[i+1:])); len(f) > 0 && f[0] != "Z" && f[0] != "X" {
			n++
		}
	}
	return n
}

func (p proc) String() string {
	return fmt.Sprintf("%s pid=%d ppid=%d sid=%d state=%s", p.Role, p.PID, p.PPID, p.SID, p.State)
}

// sample is the old container's cgroups and processes as read once. Each read has its
// own times: a process read alive was alive when its read began (processes do not come
// back), one read dead was dead when its read ended; a sampler descheduled halfway through
// a sample (this machine is shared) must not move either claim.
type sample struct {
	At        time.Time            // when the sample began
	CgroupEnd time.Time            // when the last cgroup read ended
	Procs     map[string][]int     // hierarchy -> PIDs in the cgroup
	Gone      map[string]bool      // hierarchy -> its folder is removed
	States    map[string]string    // role -> proc.state()
	ReadStart map[string]time.Time // role -> when its read began
	ReadEnd   map[string]time.Time // role -> when its read ended
	Errs      []string
}

// takeSample reads every cgroup and process of the snapshot now.
func takeSample(cgs []cgroupDir, procs []proc) sample {
	s := sample{At: time.Now(), Procs: map[string][]int{}, Gone: map[string]bool{}, States: map[string]string{},
		ReadStart: map[string]time.Time{}, ReadEnd: map[string]time.Time{}}
	for _, c := range cgs {
		pids, gone, err := cgroupProcs(c.Dir)
		if err != nil {
			s.Errs = append(s.Errs, err.Error())
		}
		s.Procs[c.Hierarchy], s.Gone[c.Hierarchy] = pids, gone
	}
	s.CgroupEnd = time.Now()
	for _, p := range procs {
		s.ReadStart[p.Role] = time.Now()
		s.States[p.Role] = p.state()
		s.ReadEnd[p.Role] = time.Now()
	}
	return s
}

// empty reports whether no hierarchy's cgroup holds a process (a removed one holds none).
func (s sample) empty() bool {
	for _, pids := range s.Procs {
		if len(pids) > 0 {
			return false
		}
	}
	return len(s.Errs) == 0
}

// dead reports whether the process of role is gone or a zombie (it runs no more code).
func (s sample) dead(role string) bool {
	st := s.States[role]
	return st == "gone" || st == "zombie"
}

// String is one line: each hierarchy's PIDs (or "removed"), then each role's state.
func (s sample) String() string {
	var cg, st []string
	for h, pids := range s.Procs {
		name := h
		if name == "" {
			name = "unified"
		}
		switch {
		case s.Gone[h]:
			cg = append(cg, name+"=removed")
		default:
			cg = append(cg, fmt.Sprintf("%s=%v", name, pids))
		}
	}
	for r, v := range s.States {
		st = append(st, r+"="+v)
	}
	sort.Strings(cg)
	sort.Strings(st)
	out := "cgroup[" + strings.Join(cg, " ") + "] procs[" + strings.Join(st, " ") + "]"
	if len(s.Errs) > 0 {
		out += " errors[" + strings.Join(s.Errs, "; ") + "]"
	}
	return out
}
