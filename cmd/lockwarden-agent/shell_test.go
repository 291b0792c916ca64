package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/examples/fenced-worker/ledger"
	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/pkg/fence/writer"
)

// appends records when the ledger accepted each append (CLOCK_MONOTONIC), of every writer.
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
	checkWriters(t, led.URL, string(p.UID))
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
	w := f.startShellSidecar(f.pod("worker-0"), led.URL)
	a, out := w.agent, w.out
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

// checkWriters fails unless every decision of the ledger at url names a writer ID of pod uid
// ($LOCKWARDEN_WRITER: the pod UID and an incarnation), not the bare pod UID.
func checkWriters(t *testing.T, url, uid string) {
	t.Helper()
	for _, o := range outcomes(t, url) {
		if owner, _, err := writer.Parse(o.Writer); err != nil || owner != uid {
			t.Errorf("ledger decision by writer %q: want %s/<incarnation> (%v)", o.Writer, uid, err)
		}
	}
}

// TestShellWorkerFenceTakenEndsTerm: the ledger has admitted the term's token from another
// writer (the pod's previous process) before the shell worker raises the fence. The worker is
// refused for that very token and exits 3 without writing; the agent ends the term without a
// release and exits 3.
func TestShellWorkerFenceTakenEndsTerm(t *testing.T) {
	f := newFixture(t)
	l := ledger.New()
	h := l.Handler()
	var wrote atomic.Int32
	previous := writer.ID("previous", writer.NewIncarnation())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fence" && r.Method == http.MethodPost {
			var req ledger.Write
			body, _ := io.ReadAll(r.Body)
			if json.Unmarshal(body, &req) == nil && req.Token > 0 {
				l.Apply("fence", ledger.Write{Writer: previous, Token: req.Token}) // it got there first
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		if r.URL.Path == "/append" {
			wrote.Add(1)
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p := f.pod("worker-0")
	a := f.startAgent(p, []string{"exec", "--grace", "1s", "--probe-address", "0", "--", "sh", script(t)},
		"LEDGER_URL="+srv.URL, "WRITE_INTERVAL=0.1")
	if code := a.wait(t, 30*time.Second); code != 3 {
		t.Errorf("agent exit code = %d, want the worker's 3; log:\n%s", code, a.out)
	}
	out := a.out.String()
	for _, want := range []string{"is in use by another writer: the term is over for this process", `"release"=false`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, `"msg"="release sent"`) {
		t.Errorf("the agent released a term its worker's fence refused; log:\n%s", out)
	}
	if n := wrote.Load(); n != 0 {
		t.Errorf("%d appends sent after the refused fence raise, want none", n)
	}
}
