package controllers_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
	"github.com/lockwarden/lockwarden/internal/testenv"
)

// managerProc is a lockwarden manager process (./bin/lockwarden, built by `make build`).
type managerProc struct {
	t      testing.TB
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	exited chan struct{}
	err    error
}

func (m *managerProc) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.out.Write(p)
}

func (m *managerProc) output() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.out.String()
}

// startManager runs the built manager against the test's API server and etcd prefix.
func (f *fixture) startManager(identity string, extra ...string) *managerProc {
	f.t.Helper()
	bin := filepath.Join(env.Root, "bin", "lockwarden")
	if _, err := os.Stat(bin); err != nil {
		f.t.Fatalf("%s not found: run `make build`", bin)
	}
	kubeconfig := filepath.Join(f.t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		f.t.Fatal(err)
	}
	m := &managerProc{t: f.t, exited: make(chan struct{})}
	m.cmd = exec.Command(bin, "--kubeconfig", kubeconfig, "--etcd-endpoints", etcd.Endpoint,
		"--etcd-prefix", f.prefix, "--election-ttl", "3s", "--etcd-lease-ttl", "13s",
		"--identity", identity, "--watch-namespaces", f.ns) // other tests' locks are not this manager's
	if len(extra) == 0 {
		extra = []string{"--metrics-bind-address", "0", "--health-probe-bind-address", "0"}
	}
	m.cmd.Args = append(m.cmd.Args, extra...)
	m.cmd.Stdout, m.cmd.Stderr = m, m
	if err := m.cmd.Start(); err != nil {
		f.t.Fatalf("start %s: %v", bin, err)
	}
	go func() {
		m.err = m.cmd.Wait()
		close(m.exited)
	}()
	f.t.Cleanup(func() {
		_ = m.cmd.Process.Signal(syscall.SIGCONT)
		_ = m.cmd.Process.Kill()
		<-m.exited
		if f.t.Failed() {
			f.t.Logf("manager %s output:\n%s", identity, m.output())
		}
	})
	return m
}

func (m *managerProc) signal(sig syscall.Signal) {
	m.t.Helper()
	if err := m.cmd.Process.Signal(sig); err != nil {
		m.t.Fatalf("signal %v: %v", sig, err)
	}
}

// waitElected waits until identity holds the controller election and returns its epoch.
func (f *fixture) waitElected(identity string, timeout time.Duration) int64 {
	f.t.Helper()
	var token int64
	eventually(f.t, timeout, func() bool {
		h, err := f.engine.Inspect(bg(), controllers.ElectionKey)
		token = h.Token
		return err == nil && h.Holder == identity
	}, func() string { return identity + " elected" })
	return token
}

// statusNeverGoesBack watches the lock's status until stop closes and reports any
// decrease of the token, maxFencingToken or controllerEpoch.
func (f *fixture) statusNeverGoesBack(name string, stop <-chan struct{}) (check func()) {
	var mu sync.Mutex
	var problems []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		var prev lockv1.DistributedLockStatus
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			var l lockv1.DistributedLock
			if err := k8s.Get(bg(), objectKey(f.ns, name), &l); err != nil {
				continue
			}
			s := l.Status
			mu.Lock()
			if s.MaxFencingToken < prev.MaxFencingToken || s.ControllerEpoch < prev.ControllerEpoch ||
				(s.FencingToken != 0 && s.FencingToken < prev.FencingToken) {
				problems = append(problems, "status went back: "+describe(&l))
			}
			mu.Unlock()
			prev = s
		}
	}()
	return func() {
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, p := range problems {
			f.t.Error(p)
		}
	}
}

// TestPausedControllerIsFenced: the active manager process is paused (SIGSTOP) past its
// election; a standby takes over and moves the lock on. When the paused one resumes, none
// of its etcd writes succeed, status never goes back, and it exits non-zero.
func TestPausedControllerIsFenced(t *testing.T) {
	f := newFixture(t)
	f.stop() // this test's controllers are processes
	zombie := f.startManager("zombie")
	epochZ := f.waitElected("zombie", 45*time.Second)
	a0 := f.pod("a-0", "a")
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", nil)
	first := f.waitFor("lock", 30*time.Second, "held by a-0", heldBy("a-0"))
	if first.Status.ControllerEpoch != epochZ {
		t.Fatalf("controllerEpoch = %d, want the zombie's %d", first.Status.ControllerEpoch, epochZ)
	}

	stopWatch := make(chan struct{})
	check := f.statusNeverGoesBack("lock", stopWatch)
	zombie.signal(syscall.SIGSTOP)
	standby := f.startManager("standby")
	epochS := f.waitElected("standby", 30*time.Second) // after the zombie's 3 s election TTL
	if epochS <= epochZ {
		t.Fatalf("standby epoch %d, want > %d", epochS, epochZ)
	}
	f.terminate(a0) // the standby hands over
	second := f.waitFor("lock", 30*time.Second, "held by a-1 under the standby", heldBy("a-1"))
	if second.Status.ControllerEpoch != epochS {
		t.Errorf("controllerEpoch = %d, want the standby's %d", second.Status.ControllerEpoch, epochS)
	}

	zombie.signal(syscall.SIGCONT)
	select {
	case <-zombie.exited:
		var exitErr *exec.ExitError
		if !errors.As(zombie.err, &exitErr) || exitErr.ExitCode() == 0 {
			t.Errorf("zombie exited with %v, want a non-zero exit (election lost)", zombie.err)
		}
	case <-time.After(20 * time.Second):
		t.Errorf("zombie still running 20 s after SIGCONT")
	}
	time.Sleep(2 * time.Second) // let any late write of the zombie land, if one could
	close(stopWatch)
	check()
	last := f.get("lock")
	if last.Status.Holder != "a-1" || last.Status.FencingToken != second.Status.FencingToken || last.Status.ControllerEpoch != epochS {
		t.Errorf("final status %s; want a-1, token %d, epoch %d", describe(last), second.Status.FencingToken, epochS)
	}
	if got := f.keyToken("lock"); got != second.Status.FencingToken {
		t.Errorf("etcd token = %d, want %d", got, second.Status.FencingToken)
	}
	_ = standby
}

// TestKilledControllerStandbyTakesOver: the active process is killed (no graceful
// release); the standby process is elected after the election TTL and changes no term.
func TestKilledControllerStandbyTakesOver(t *testing.T) {
	f := newFixture(t)
	f.stop()
	active := f.startManager("first")
	f.waitElected("first", 45*time.Second)
	f.startManager("second")
	f.pod("a-0", "a")
	f.lock("lock", "a", nil)
	first := f.waitFor("lock", 30*time.Second, "held by a-0", heldBy("a-0"))
	active.signal(syscall.SIGKILL)
	f.waitElected("second", 30*time.Second)
	same := f.get("lock")
	if same.Status.FencingToken != first.Status.FencingToken || same.Status.Phase != lockv1.PhaseHeld {
		t.Errorf("after takeover: %s; want Held with token %d", describe(same), first.Status.FencingToken)
	}
	if got := f.keyToken("lock"); got != first.Status.FencingToken {
		t.Errorf("etcd token = %d, want %d (grant lease resumed, key kept)", got, first.Status.FencingToken)
	}
}

// TestStandbyReadyAndReadyzFollowsEtcd: a standby reports Ready (readiness never depends on
// the election); /readyz fails on every replica while etcd is down and recovers after; the
// metrics say which replica is active.
func TestStandbyReadyAndReadyzFollowsEtcd(t *testing.T) {
	f := newFixture(t)
	f.stop()
	ports, err := testenv.FreePorts(4)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	f.startManager("first", "--metrics-bind-address", addr(ports[0]), "--health-probe-bind-address", addr(ports[1]))
	f.waitElected("first", 45*time.Second)
	f.startManager("second", "--metrics-bind-address", addr(ports[2]), "--health-probe-bind-address", addr(ports[3]))
	readyz := func(p int) int {
		resp, err := http.Get("http://" + addr(p) + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// want 200 (ready) or 500 (controller-runtime's answer for a failing check).
	waitStatus := func(p, want int, within time.Duration, what string) {
		t.Helper()
		got := 0
		eventually(t, within, func() bool { got = readyz(p); return got == want },
			func() string { return fmt.Sprintf("%s: /readyz on %d = %d, want %d", what, p, got, want) })
	}
	waitStatus(ports[1], 200, 20*time.Second, "active")
	waitStatus(ports[3], 200, 20*time.Second, "standby")
	for _, c := range []struct {
		port int
		want string
	}{{ports[0], "lockwarden_active 1"}, {ports[2], "lockwarden_active 0"}} {
		resp, err := http.Get("http://" + addr(c.port) + "/metrics")
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), c.want) {
			t.Errorf("metrics on %d lack %q", c.port, c.want)
		}
	}
	etcd.Stop()
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			_ = etcd.Start()
		}
	})
	waitStatus(ports[3], 500, 10*time.Second, "standby with etcd down")
	if err := etcd.Start(); err != nil {
		t.Fatalf("restart etcd: %v", err)
	}
	restarted = true
	waitStatus(ports[3], 200, 20*time.Second, "standby with etcd back")
}

// TestSteadyStateReconcilesRarely: a held lock in steady state is not reconciled again and
// again (no polling): the manager's reconcile counter barely moves over 3 x TTL.
func TestSteadyStateReconcilesRarely(t *testing.T) {
	f := newFixture(t)
	f.stop()
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := "127.0.0.1:" + strconv.Itoa(ports[0])
	f.startManager("only", "--metrics-bind-address", metricsAddr, "--health-probe-bind-address", "0")
	f.pod("a-0", "a")
	f.pod("a-1", "a")
	f.lock("lock", "a", nil)
	f.waitFor("lock", 30*time.Second, "held", inPhase(lockv1.PhaseHeld))
	reconciles := func() float64 {
		t.Helper()
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var total float64
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "controller_runtime_reconcile_total{") && strings.Contains(line, `controller="distributedlock"`) {
				if v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64); err == nil {
					total += v
				}
			}
		}
		return total
	}
	time.Sleep(2 * time.Second) // let the grant's own follow-up turns finish
	before := reconciles()
	time.Sleep(6 * time.Second) // 3 x the 2 s lease
	if delta := reconciles() - before; delta > 3 {
		t.Errorf("%v reconciles of a steady held lock in 6 s, want at most 3", delta)
	}
}
