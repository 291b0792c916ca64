package main

// Review 20 (adversarial review of the pod side of issue 20, merge 0d6e171): schedules in
// which the agent's default release is sent while work under the token still runs, and in
// which a blip ends a healthy term for good.

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/internal/testenv"
)

// asAgentWithSignalsEnv makes this test binary run as the agent the way main does: SIGTERM and
// SIGINT end its context (pdeath_test.go's asAgentEnv runs it without, for SIGKILL only).
const asAgentWithSignalsEnv = "LWAGENT_TEST_AS_AGENT_SIGNALS"

func init() {
	if os.Getenv(asAgentWithSignalsEnv) != "" && os.Getenv(guardEnv) == "" { // the guard inherits it
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
}

// escapeScript starts a writer that leaves the child's process group (setsid: a daemon, a
// `nohup setsid` helper, a forked server), which writes its PID to $1 and then appends to $2
// every 10 ms; the child itself exits on SIGTERM.
const escapeScript = `setsid sh -c 'echo $$ >> "$1"; while :; do echo e >> "$2"; sleep 0.01; done' sh "$1" "$2" &
trap 'exit 0' TERM
while :; do sleep 0.05; done`

// TestReview20ExecReleasesWhileEscapedProcessWrites: exec mode releases by default once the
// child's process group is gone. A process the child started in a session of its own is not in
// that group: the agent's stop never signals it, the guard exits while it is still its child
// (it waits only for the group), and the agent sends the holder-release while it still writes.
// The controller then grants the next pod at once. docs/agent.md: "Exec qualifies for the
// release because the work *is* cmd's process group".
func TestReview20ExecReleasesWhileEscapedProcessWrites(t *testing.T) {
	f := newFixture(t)
	p := f.pod("worker-0")
	dir := t.TempDir()
	pids, out := filepath.Join(dir, "pids"), filepath.Join(dir, "out")
	proxy, err := apiproxy.Start(env.Config, apiproxy.Options{})
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The agent in a process of its own, its output in a file (as a container's): as
	// pdeath_test.go runs it.
	agent := exec.Command(self, "exec", "--lock", f.lock, "--namespace", f.ns, "--kubeconfig", f.kubeconfigFor(proxy, p.Name),
		"--grace", "1s", "--probe-address", "0", "--", "sh", "-c", escapeScript, "sh", pids, out)
	agent.Env = append(os.Environ(), asAgentWithSignalsEnv+"=1", "POD_UID="+string(p.UID), "POD_NAME="+p.Name)
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
	var escaped []int
	t.Cleanup(func() {
		for _, pid := range escaped {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = agent.Process.Kill()
		_ = agent.Wait()
	})
	eventually(t, 30*time.Second, func() bool {
		escaped = readPIDs(pids)
		return len(escaped) == 1 && size(out) > 0
	}, func() string { return fmt.Sprintf("the escaped writer never wrote; agent log:\n%s", log) })

	if err := agent.Process.Signal(syscall.SIGTERM); err != nil { // the pod is deleted
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- agent.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("agent: %v; log:\n%s", err, log)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("agent still running 15s after SIGTERM; log:\n%s", log)
	}
	released := f.get().Annotations[lockv1.AnnotationHolderRelease]
	n := size(out)
	time.Sleep(200 * time.Millisecond) // 20 write periods
	m := size(out)
	t.Logf("holder-release %q; the escaped writer %d wrote %d bytes in the 200 ms after the agent exited", released, escaped[0], m-n)
	if released != "" && (m != n || !dead(escaped[0])) {
		t.Errorf("the agent released the term (holder-release %q) while a process its child started still runs and writes (pid %d, %d bytes in 200 ms); agent log:\n%s",
			released, escaped[0], m-n, log)
	}
}

// TestReview20SidecarStoppedAloneReleases: the sidecar releases on SIGTERM by default. The
// kubelet stops a sidecar alone when its liveness probe fails (examples/shell-worker's
// manifest probes /healthz), or with the pod's other containers when it runs as a regular
// container: the pod is not being deleted, the workload goes on. Its last /leader answer
// allowed it to use the token for validUntilSeconds from its send time ("the token may be
// used until the client's own send time of the request plus this"), but the release lets the
// controller grant the other pod at once, and the other pod's sidecar answers 200 within that
// window: two pods told they lead at once, beyond any margin. Without the release the
// controller would wait for the lock delay after Releasing.
func TestReview20SidecarStoppedAloneReleases(t *testing.T) {
	f := newFixture(t)
	p0, p1 := f.pod("worker-0"), f.pod("worker-1")
	ports, err := testenv.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	base0, base1 := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	a0 := f.startAgent(p0, []string{"sidecar", "--listen", base0, "--token-file", filepath.Join(f.dir, "token0")})
	var last answer
	eventually(t, 30*time.Second, func() bool {
		last, err = getLeader(t, "http://"+base0)
		return err == nil && last.status == http.StatusOK
	}, func() string { return fmt.Sprintf("worker-0's /leader: %+v, %v; log:\n%s", last, err, a0.out) })
	a1 := f.startAgent(p1, []string{"sidecar", "--listen", base1, "--token-file", filepath.Join(f.dir, "token1")})
	time.Sleep(time.Second) // worker-1's sidecar follows the lock
	// worker-0's workload asks once more, then its sidecar alone is stopped (liveness restart).
	if last, err = getLeader(t, "http://"+base0); err != nil || last.status != http.StatusOK {
		t.Fatalf("worker-0's /leader: %+v, %v", last, err)
	}
	a0.cancel()
	if code := a0.wait(t, 15*time.Second); code != exitOK {
		t.Errorf("worker-0's sidecar exited %d; log:\n%s", code, a0.out)
	}
	until := last.sent + int64(last.reply.ValidUntilSeconds*float64(time.Second))
	var next answer
	for monoNow() < until+int64(time.Second) {
		if next, err = getLeader(t, "http://"+base1); err == nil && next.status == http.StatusOK {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	reason := ""
	for _, h := range f.get().Status.History {
		if string(h.HolderUID) == a0.uid && h.Token == last.reply.Token {
			reason = h.Reason
		}
	}
	if next.status == http.StatusOK && next.recv < until {
		t.Errorf("worker-1's sidecar answered 200 (token %d) %v before worker-0's last answer (token %d, validUntilSeconds %.2f) ran out; worker-0's pod was never deleted; its term ended %q",
			next.reply.Token, time.Duration(until-next.recv).Round(time.Millisecond), last.reply.Token, last.reply.ValidUntilSeconds, reason)
	} else {
		t.Logf("worker-1 answered %d; worker-0's term ended %q; worker-1's log:\n%s", next.status, reason, a1.out)
	}
}

// TestReview20ExecRestartInTermEndsAgent: a cut-off from the API server long enough that the
// term's validity runs low makes the agent stop its child; when reads confirm the term again
// the agent starts the child again in the same term (TestExecStopsWhenAPIServerUnreachable
// shows it), with a new LOCKWARDEN_WRITER. Every resource the first child fenced has admitted
// the token from that writer, so the new child is refused for the very token it holds, exits
// 3, and the agent abandons a term the pod still holds and exits 3: a read blip costs a
// container restart (and, with a sidecar, the lock delay), although nothing but the agent's
// own stop came between the two children.
//
// Fixed by the podfix branch, which changes the contract: the agent no longer starts a second
// child under a token; it abandons the token as it stops the child, its readiness fails, and
// the controller ends the term (the lock delay) and grants a new token, under which the child
// starts again. So the test now runs the agent with a probe address and the kubelet's
// readiness probe (followReadiness): without it nothing in this fixture would end the term,
// as nothing probes readiness. The deadline (3 x validFor) is unchanged: the lock delay fits.
func TestReview20ExecRestartInTermEndsAgent(t *testing.T) {
	f := newFixture(t)
	led, acc := ledgerServer(t)
	p := f.pod("worker-0")
	probe := probeAddress(t)
	a := f.startAgent(p, []string{"exec", "--grace", "1s", "--probe-address", probe, "--", "sh", script(t)},
		"LEDGER_URL="+led.URL, "WRITE_INTERVAL=0.1")
	f.followReadiness(p, probe)
	eventually(t, 30*time.Second, func() bool { return acc.count() >= 3 },
		func() string { return fmt.Sprintf("no appends from the shell worker; log:\n%s", a.out) })
	a.proxy.SetMode(apiproxy.Hold)
	eventually(t, 3*validFor(), func() bool { return strings.Contains(a.out.String(), "validity ending without a confirming read") },
		func() string { return fmt.Sprintf("the child was not stopped; log:\n%s", a.out) })
	n := acc.count()
	a.proxy.SetMode(apiproxy.Pass)
	deadline := time.Now().Add(3 * validFor())
	for time.Now().Before(deadline) && acc.count() == n {
		select {
		case code := <-a.done:
			close(a.done)
			t.Fatalf("the agent exited %d after the API server came back, its pod still holding the lock (holder %s); log:\n%s", code, f.get().Status.Holder, a.out)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if acc.count() == n {
		t.Errorf("no append after the API server came back; log:\n%s", a.out)
	}
}
