//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// oldRoles are the old container's processes the proof needs gone.
var oldRoles = []string{"main", "daemon", "stopped", "exec"}

// prepare waits until the case's pod runs, starts the exec'd process, and takes the
// snapshot: the old container's cgroups and its four processes (the stopped one in state T).
func (c *evCase) prepare(t *testing.T, n *node) {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, 2*time.Minute, "pod "+c.pod+" running", func() bool {
		p, err := n.kube.CoreV1().Pods(evidenceNS).Get(context.Background(), c.pod, metav1.GetOptions{})
		if err != nil {
			return false
		}
		pod = p
		for _, name := range []string{mainContainer, c.shape.otherContainer()} {
			if cs := containerStatus(p, name); name != "" && (cs == nil || cs.State.Running == nil || cs.ContainerID == "") {
				return false
			}
		}
		return true
	})
	tasks := taskPIDs(t, n)
	cs := containerStatus(pod, mainContainer)
	id := strings.TrimPrefix(cs.ContainerID, "containerd://")
	mainPID, ok := tasks[id]
	if !ok {
		t.Fatalf("container %s of pod %s is not among containerd's tasks", id, c.pod)
	}
	var err error
	if c.cgroups, err = containerCgroups(mainPID, id); err != nil {
		t.Fatal(err)
	}
	if other := c.shape.otherContainer(); other != "" {
		ocs := containerStatus(pod, other)
		pid, ok := tasks[strings.TrimPrefix(ocs.ContainerID, "containerd://")]
		p, alive := readProc(pid)
		if !ok || !alive {
			t.Fatalf("the process of container %s of pod %s not found", other, c.pod)
		}
		p.Role = other
		c.others = []proc{p}
	}
	c.exec = startExec(t, n, c.pod)
	eventually(t, time.Minute, "main, daemon, stopped child (state T) and exec'd process in "+c.pod+"'s cgroup", func() bool {
		c.procs, c.all = nil, nil
		roles := map[string]bool{}
		for _, pid := range c.cgroupPIDs() {
			p, ok := readProc(pid)
			if !ok {
				continue
			}
			c.all = append(c.all, pid)
			if p.Role == "stopped" && p.State != "T" {
				continue
			}
			c.procs = append(c.procs, p)
			roles[p.Role] = true
		}
		return len(c.procs) == len(oldRoles) && roles["main"] && roles["daemon"] && roles["stopped"] && roles["exec"]
	})
	c.mu.Lock()
	c.armed, c.oldID, c.oldRest = true, cs.ContainerID, cs.RestartCount
	c.mu.Unlock()
}

// cgroupPIDs is every PID in any of the old container's cgroups, each once.
func (c *evCase) cgroupPIDs() []int {
	seen := map[int]bool{}
	var out []int
	for _, cg := range c.cgroups {
		pids, _, _ := cgroupProcs(cg.Dir)
		for _, p := range pids {
			if !seen[p] {
				seen[p] = true
				out = append(out, p)
			}
		}
	}
	return out
}

func (c *evCase) role(r string) proc {
	for _, p := range c.procs {
		if p.Role == r {
			return p
		}
	}
	return proc{}
}

// run kills the main process, waits until the API shows the new containerID and the old
// processes are gone (or 5 s more), kills any survivor, and checks what the proof needs.
func (c *evCase) run(t *testing.T, n *node) {
	c.t0 = time.Now()
	c.poll = startPoller(c.t0, c.cgroups, append(c.procs, c.others...))
	defer c.poll.halt()
	defer c.killSurvivors(t)
	main := c.role("main")
	if err := syscall.Kill(main.PID, c.kind.trigger()); err != nil {
		c.fail(t, fmt.Sprintf("send %s to the main process %d: %v", c.kind.signalName(), main.PID, err))
	}
	if !poll(90*time.Second, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return !c.newAt.IsZero()
	}) {
		c.fail(t, "the API showed no new containerID within 90 s of the "+string(c.kind))
	}
	_ = poll(5*time.Second, func() bool { return c.poll.settled(oldRoles) })
	c.poll.halt()
	c.killSurvivors(t)
	c.exec.stop(t)
	wait := time.Duration(0)
	if c.kind == killLiveness {
		wait = 5 * time.Second
	}
	c.killingEvents = kubeletEvents(t, n, c.pod, wait)

	c.mu.Lock()
	defer c.mu.Unlock()
	if why := c.causeMismatch(); why != "" {
		c.fail(t, why)
	}
	exit, ok := c.rt.initExit(c.oldID)
	if !ok {
		c.fail(t, "containerd published no /tasks/exit event for the old container's init")
	}
	if c.shape != shapeDefault {
		t.Logf("%s, %s: at the new containerID %s", c.shape, c.kind, c.atNew)
		return
	}
	if !c.atNew.empty() {
		t.Errorf("the old container's cgroup is not empty when the API first shows the new containerID: %s", c.atNew)
	}
	for _, r := range oldRoles {
		if !c.atNew.dead(r) {
			t.Errorf("the old container's %s process (pid %d) is %s when the API first shows the new containerID", r, c.role(r).PID, c.atNew.States[r])
		}
	}
	// the mechanism under it: the runtime reports the init's exit only after the kernel
	// ended every process of its PID namespace (a sample's time precedes its reads, so
	// "seen alive at" is a moment the process certainly lived)
	if alive, _ := c.poll.aliveAfter(exit.Published.Sub(c.t0), oldRoles); len(alive) > 0 {
		t.Errorf("containerd published the init's exit at %s, but %v were seen alive after it", sampledMs(exit.Published.Sub(c.t0)), alive)
	}
}

// fail marks the case as not recorded and ends it.
func (c *evCase) fail(t *testing.T, why string) {
	t.Helper()
	c.recordingFailed = why
	t.Fatal(why)
}

// causeMismatch says why the recording is not of its kind of kill, or "": the main process
// must have died of what the case did to it (the old container's exit code and reason,
// and for the liveness kill the kubelet's Killing event).
func (c *evCase) causeMismatch() string {
	switch {
	case c.term == nil:
		return "the API never showed the old container terminated"
	case c.kind == killCrash && c.term.ExitCode != 2:
		return fmt.Sprintf("exit code %d, want 2 (a Go panic)", c.term.ExitCode)
	case c.kind == killSIGKILL && c.term.ExitCode != 137:
		return fmt.Sprintf("exit code %d, want 137 (SIGKILL)", c.term.ExitCode)
	case c.kind == killOOM && c.term.Reason != "OOMKilled":
		return fmt.Sprintf("reason %q (exit %d), want OOMKilled", c.term.Reason, c.term.ExitCode)
	case c.kind == killLiveness && !strings.Contains(strings.Join(c.killingEvents, "\n"), "failed liveness probe"):
		return fmt.Sprintf("no Killing event for a failed liveness probe: %q", c.killingEvents)
	}
	return ""
}

// killSurvivors SIGKILLs every process of the old container still alive (the same PID
// and start time as before the kill): the shapes without a PID namespace of their own may
// leave some.
func (c *evCase) killSurvivors(t *testing.T) {
	for _, p := range c.procs {
		if strings.HasPrefix(p.state(), "alive") {
			if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil {
				t.Logf("kill the survivor %s: %v", p, err)
			}
		}
	}
}

// kubeletEvents are the kubelet's Killing and Unhealthy events of the pod, as "reason: message";
// wait is how long to wait for the first (the kubelet records events asynchronously).
func kubeletEvents(t *testing.T, n *node, pod string, wait time.Duration) []string {
	var out []string
	_ = poll(wait, func() bool {
		out = nil
		evs, err := n.kube.CoreV1().Events(evidenceNS).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			t.Logf("list the events of %s: %v", pod, err)
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == "Killing" || e.Reason == "Unhealthy" {
				out = append(out, e.Reason+": "+e.Message)
			}
		}
		return len(out) > 0
	})
	return out
}

// taskPIDs maps each containerd task (container ID) to its host PID.
func taskPIDs(t *testing.T, n *node) map[string]int {
	t.Helper()
	out, err := n.script(nil, "ctr", "tasks", "ls")
	if err != nil {
		t.Fatalf("ctr tasks ls: %v\n%s", err, out)
	}
	pids := map[string]int{}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			if pid, err := strconv.Atoi(f[1]); err == nil {
				pids[f[0]] = pid
			}
		}
	}
	return pids
}

// execClient is a `kubectl exec` into a case's main container that runs `crashee exec`
// until that process dies.
type execClient struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	done   chan struct{}
	err    error
	killed bool
}

func startExec(t *testing.T, n *node, pod string) *execClient {
	t.Helper()
	e := &execClient{done: make(chan struct{})}
	e.cmd = exec.Command(filepath.Join(n.root, "hack", "node", "kubectl"), "-n", evidenceNS, "exec", pod, "-c", mainContainer, "--", "/crashee", "exec")
	e.cmd.Env = n.environ(nil)
	e.cmd.Stdout, e.cmd.Stderr = &e.out, &e.out
	if err := e.cmd.Start(); err != nil {
		t.Fatalf("kubectl exec into %s: %v", pod, err)
	}
	go func() {
		e.err = e.cmd.Wait()
		close(e.done)
	}()
	t.Cleanup(func() { e.stop(t) })
	return e
}

// stop waits up to 10 s for the client to end (its process died), then kills it by PID.
func (e *execClient) stop(t *testing.T) {
	select {
	case <-e.done:
		return
	case <-time.After(10 * time.Second):
	}
	e.killed = true
	if err := e.cmd.Process.Kill(); err != nil {
		t.Logf("kill kubectl exec (pid %d): %v", e.cmd.Process.Pid, err)
	}
	<-e.done
}

// result is how the client ended: its error and output.
func (e *execClient) result() string {
	select {
	case <-e.done:
	default:
		return "still running"
	}
	how := "exit 0"
	if e.err != nil {
		how = e.err.Error()
	}
	if e.killed {
		how = "killed by the test after 10 s (" + how + ")"
	}
	return how + ": " + strings.TrimSpace(e.out.String())
}
