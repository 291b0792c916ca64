package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/apiproxy"
)

// asAgentEnv makes this test binary run as the agent, `lockwarden-agent <its arguments>`, in
// a process of its own, so that a test can SIGKILL it.
const asAgentEnv = "LWAGENT_TEST_AS_AGENT"

func init() {
	if os.Getenv(asAgentEnv) != "" && os.Getenv(guardEnv) == "" { // the agent's guard inherits it
		os.Exit(run(context.Background(), os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
	}
}

// writerScript writes its PID, then its background subshell's (in its process group), to
// pids, then has both append a line to out every 10 ms until they die.
const writerScript = `echo $$ >> "$1"; (while :; do echo g >> "$2"; sleep 0.01; done) & echo $! >> "$1"; while :; do echo c >> "$2"; sleep 0.01; done`

// TestExecChildDiesWithAgent: an agent killed by SIGKILL (outside a container, nothing kills
// its descendants for it) leaves no child writing: its child and the child's process group
// stop within a second, while the term they were started for may still look valid.
func TestExecChildDiesWithAgent(t *testing.T) {
	f := newFixture(t)
	p := f.pod("worker-0")
	dir := t.TempDir()
	pids, out := filepath.Join(dir, "pids"), filepath.Join(dir, "out")
	proxy, err := apiproxy.Start(env.Config, apiproxy.Options{})
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	kubeconfig := f.kubeconfigFor(proxy, p.Name)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	agent := exec.Command(self, "exec", "--lock", f.lock, "--namespace", f.ns, "--kubeconfig", kubeconfig,
		"--grace", "1s", "--probe-address", "0", "--", "sh", "-c", writerScript, "sh", pids, out)
	agent.Env = append(os.Environ(), asAgentEnv+"=1", "POD_UID="+string(p.UID), "POD_NAME="+p.Name)
	// A file, not a pipe: an orphan holding a pipe's write end would keep Wait waiting.
	logFile, err := os.Create(filepath.Join(dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	agent.Stdout, agent.Stderr = logFile, logFile
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	log := logText(logFile.Name())
	var procs []int
	t.Cleanup(func() {
		for _, pid := range procs { // left running by a failure: stop them here
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = agent.Process.Kill()
		_ = agent.Wait()
	})
	eventually(t, 30*time.Second, func() bool {
		procs = readPIDs(pids)
		return len(procs) == 2 && size(out) > 0
	}, func() string { return fmt.Sprintf("the child never wrote (pids %v); agent log:\n%s", procs, log) })

	if err := agent.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = agent.Wait()
	eventually(t, 5*time.Second, func() bool { return dead(procs[0]) && dead(procs[1]) }, func() string {
		return fmt.Sprintf("%v after the agent's SIGKILL, child %d dead %v, its group's subshell %d dead %v; still writing: %d bytes written",
			time.Since(killed).Round(time.Millisecond), procs[0], dead(procs[0]), procs[1], dead(procs[1]), size(out))
	})
	t.Logf("child and its group gone %v after the agent's SIGKILL", time.Since(killed).Round(time.Millisecond))
	n := size(out)
	time.Sleep(200 * time.Millisecond) // 20 write periods: nothing may be written any more
	if m := size(out); m != n {
		t.Errorf("written after both were seen dead: %d bytes, then %d", n, m)
	}
}

// logText prints the file at path when formatted: the agent's log, for failure messages.
type logText string

func (l logText) String() string {
	b, _ := os.ReadFile(string(l))
	return string(b)
}

// readPIDs reads one PID per line.
func readPIDs(path string) []int {
	b, _ := os.ReadFile(path)
	var ps []int
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			ps = append(ps, n)
		}
	}
	return ps
}

// size is the file's size, 0 when missing.
func size(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}
