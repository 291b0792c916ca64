package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/examples/fenced-worker/ledger"
	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/internal/testenv"
)

// appends records when the ledger accepted each append (CLOCK_MONOTONIC). Each test here has
// one writer per ledger.
type appends struct {
	mu  sync.Mutex
	all []int64
}

// statusRecorder keeps the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// ledgerServer serves the example ledger, recording accepted appends.
func ledgerServer(t *testing.T) (*httptest.Server, *appends) {
	t.Helper()
	rec := &appends{}
	h := ledger.New().Handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sr := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		h.ServeHTTP(sr, r)
		if r.URL.Path == "/append" && sr.status == http.StatusOK {
			at := monoNow()
			rec.mu.Lock()
			rec.all = append(rec.all, at)
			rec.mu.Unlock()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, rec
}

// count is how many appends the ledger accepted.
func (a *appends) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.all)
}

// lastAccepted is the newest accepted append.
func (a *appends) lastAccepted() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var last int64
	for _, v := range a.all {
		last = max(last, v)
	}
	return last
}

// script is examples/shell-worker/worker.sh.
func script(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "examples", "shell-worker", "worker.sh")
}

// TestShellWorkerUnderExec runs examples/shell-worker/worker.sh under the agent's exec mode:
// it writes with the term's token, and no append is accepted after the validity its agent's
// last read could give while the API server is unreachable.
func TestShellWorkerUnderExec(t *testing.T) {
	f := newFixture(t)
	led, acc := ledgerServer(t)
	p := f.pod("worker-0")
	a := f.startAgent(p, []string{"exec", "--grace", "1s", "--probe-address", "0", "--", "sh", script(t)},
		"LEDGER_URL="+led.URL, "WRITE_INTERVAL=0.1")
	eventually(t, 30*time.Second, func() bool { return acc.count() >= 3 },
		func() string { return fmt.Sprintf("no appends from the shell worker; log:\n%s", a.out) })
	a.proxy.SetMode(apiproxy.Hold)
	time.Sleep(validFor() + time.Second)
	last := acc.lastAccepted()
	bound := a.reads.lastBefore(last) + int64(validFor())
	if last >= bound {
		t.Errorf("an append was accepted %v after the validity bound; log:\n%s", time.Duration(last-bound), a.out)
	} else {
		t.Logf("%d appends; the last accepted %v before the validity bound", acc.count(), time.Duration(bound-last).Round(time.Millisecond))
	}
}

// TestShellWorkerWithSidecar runs worker.sh in sidecar mode (LEADER_URL) as its own process
// beside the agent's sidecar: it writes only while /leader answers 200, and no append is
// accepted after the validity bound once the sidecar is cut off from the API server.
func TestShellWorkerWithSidecar(t *testing.T) {
	f := newFixture(t)
	led, acc := ledgerServer(t)
	p := f.pod("worker-0")
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", ports[0])
	a := f.startAgent(p, []string{"sidecar", "--listen", listen, "--token-file", filepath.Join(f.dir, "token")})
	out := &syncBuffer{}
	cmd := exec.Command("sh", script(t))
	cmd.Env = append(os.Environ(), "LEADER_URL=http://"+listen, "LEDGER_URL="+led.URL, "POD_UID="+string(p.UID),
		"POD_NAME="+p.Name, "WRITE_INTERVAL=0.1")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
	})
	eventually(t, 30*time.Second, func() bool { return acc.count() >= 3 },
		func() string {
			return fmt.Sprintf("no appends from the shell worker; its output:\n%s\nagent log:\n%s", out, a.out)
		})
	a.proxy.SetMode(apiproxy.Hold)
	time.Sleep(validFor() + time.Second)
	last := acc.lastAccepted()
	bound := a.reads.lastBefore(last) + int64(validFor())
	if last >= bound {
		t.Errorf("an append was accepted %v after the validity bound; worker output:\n%s", time.Duration(last-bound), out)
	} else {
		t.Logf("%d appends; the last accepted %v before the validity bound", acc.count(), time.Duration(bound-last).Round(time.Millisecond))
	}
	a.proxy.SetMode(apiproxy.Pass)
	n := acc.count()
	eventually(t, 3*validFor(), func() bool { return acc.count() > n },
		func() string {
			return fmt.Sprintf("no appends after the API server came back; worker output:\n%s", out)
		})
}
