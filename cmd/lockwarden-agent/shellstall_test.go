package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/lockwarden/lockwarden/examples/fenced-worker/ledger"
	"github.com/lockwarden/lockwarden/internal/testenv"
)

// shellWorker is worker.sh in sidecar mode (LEADER_URL) beside pod p's agent sidecar.
type shellWorker struct {
	agent *agent
	out   *syncBuffer
	stall string // its STALL_FILE
}

// startShellSidecar starts the agent's sidecar for p and worker.sh as its own process beside
// it, writing to the ledger at ledgerURL; cleanup stops the worker.
func (f *fixture) startShellSidecar(p *corev1.Pod, ledgerURL string) *shellWorker {
	t := f.t
	t.Helper()
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	listen := fmt.Sprintf("127.0.0.1:%d", ports[0])
	w := &shellWorker{out: &syncBuffer{}, stall: filepath.Join(f.dir, p.Name+".stall")}
	w.agent = f.startAgent(p, []string{"sidecar", "--listen", listen, "--token-file", filepath.Join(f.dir, p.Name+".token")})
	cmd := exec.Command("sh", script(t))
	cmd.Env = append(os.Environ(), "LEADER_URL=http://"+listen, "LEDGER_URL="+ledgerURL, "POD_UID="+string(p.UID),
		"POD_NAME="+p.Name, "WRITE_INTERVAL=0.1", "STALL_FILE="+w.stall)
	cmd.Stdout, cmd.Stderr = w.out, w.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.Remove(w.stall)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
	})
	return w
}

// outcomes reads the ledger's decisions.
func outcomes(t *testing.T, url string) []ledger.Outcome {
	t.Helper()
	resp, err := http.Get(url + "/outcomes")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var outs []ledger.Outcome
	if err := json.NewDecoder(resp.Body).Decode(&outs); err != nil {
		t.Fatal(err)
	}
	return outs
}

// TestShellWorkerStalledWriteIsRefused is the fence under test (issue 25 item 6): the holder's
// worker.sh stalls between its token check (/leader answered 200 with token T) and its write
// (the STALL_FILE hook); its pod turns NotReady, the controller ends the term after the lock
// delay and grants the other pod, whose worker raises the fence and appends with a higher
// token. Only then is the stalled write sent, with T: the ledger must refuse it, and nothing
// with T may be accepted after the higher token.
func TestShellWorkerStalledWriteIsRefused(t *testing.T) {
	f := newFixture(t)
	led, acc := ledgerServer(t)
	pods := []*corev1.Pod{f.pod("worker-0"), f.pod("worker-1")}
	workers := map[string]*shellWorker{}
	for _, p := range pods {
		workers[string(p.UID)] = f.startShellSidecar(p, led.URL)
	}
	eventually(t, 30*time.Second, func() bool { return acc.count() >= 3 }, func() string {
		return fmt.Sprintf("no appends from the shell workers; lock %s", describeLock(f))
	})
	holderUID := string(f.get().Status.HolderUID)
	hw, ok := workers[holderUID]
	if !ok {
		t.Fatalf("the lock's holder %q is none of the pods; lock %s", holderUID, describeLock(f))
	}
	var holder *corev1.Pod
	for _, p := range pods {
		if string(p.UID) == holderUID {
			holder = p
		}
	}
	if err := os.WriteFile(hw.stall, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var token int64
	eventually(t, 10*time.Second, func() bool {
		b, err := os.ReadFile(hw.stall + ".stalled")
		token, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return err == nil && token > 0
	}, func() string { return fmt.Sprintf("the holder's worker never stalled; its output:\n%s", hw.out) })
	if _, err := f.kubelet.NotReady(context.Background(), holder); err != nil {
		t.Fatal(err)
	}
	var next int64
	eventually(t, 40*time.Second, func() bool {
		for _, o := range outcomes(t, led.URL) {
			if o.Accepted && o.Op == "append" && o.Token > token {
				next = o.Token
				return true
			}
		}
		return false
	}, func() string {
		return fmt.Sprintf("no append with a token above the stalled %d; lock %s", token, describeLock(f))
	})
	if err := os.Remove(hw.stall); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("ledger refused token %d (stale)", token)
	eventually(t, 10*time.Second, func() bool { return strings.Contains(hw.out.String(), want) },
		func() string {
			return fmt.Sprintf("the stalled worker never reported %q; its output:\n%s", want, hw.out)
		})
	refused, higherSeen := false, false
	for _, o := range outcomes(t, led.URL) {
		switch {
		case o.Accepted && o.Token >= next:
			higherSeen = true
		case o.Accepted && o.Token <= token && higherSeen:
			t.Errorf("the ledger accepted %s with token %d from %s after token %d", o.Op, o.Token, o.Writer, next)
		case !o.Accepted && o.Token == token && higherSeen:
			refused = true
		}
	}
	if !refused {
		t.Errorf("no refusal of token %d after token %d in the ledger's outcomes %+v", token, next, outcomes(t, led.URL))
	}
	t.Logf("stalled write with token %d refused after the next holder's append with token %d", token, next)
}

// describeLock is the lock's status for failure messages.
func describeLock(f *fixture) string {
	st := f.get().Status
	return fmt.Sprintf("phase %s holder %s (%s) token %d", st.Phase, st.Holder, st.HolderUID, st.FencingToken)
}
