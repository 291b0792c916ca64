package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/examples/fenced-worker/ledger"
	"github.com/lockwarden/lockwarden/pkg/fence/writer"
)

// shellLock is the lock of the non-Go workers (config/samples): pods reports-0 and reports-1.
const shellLock = "reports-leader"

// startShellWorkers runs examples/shell-worker/worker.sh, a POSIX sh program, under
// `lockwarden-agent exec` for each reports pod, writing to a ledger of its own (fencing
// tokens are per etcd, so two locks' writers must not share one ledger's fence).
func (p *playground) startShellWorkers() error {
	port, err := freePort()
	if err != nil {
		return err
	}
	p.shellLedgerAt = "http://127.0.0.1:" + strconv.Itoa(port)
	bin := func(name string) string { return filepath.Join(p.root, "bin", name) }
	if p.shellLedger, err = start(p.dir, "shell-ledger", bin("fenced-worker"), nil, "ledger", "--listen", "127.0.0.1:"+strconv.Itoa(port)); err != nil {
		return err
	}
	script := filepath.Join(p.root, "examples", "shell-worker", "worker.sh")
	for _, name := range []string{"reports-0", "reports-1"} {
		pod := p.pods[name]
		// The pod's own token, so that the agent's release (its default) is admitted.
		kubeconfig, err := p.podKubeconfig(context.Background(), pod)
		if err != nil {
			return err
		}
		w, err := start(p.dir, "shell-"+name, bin("lockwarden-agent"), []string{
			"KUBECONFIG=" + kubeconfig, "POD_NAME=" + name, "POD_UID=" + string(pod.UID),
			"LEDGER_URL=" + p.shellLedgerAt, "WRITE_INTERVAL=0.5",
		}, "exec", "--lock", shellLock, "--namespace", ns, "--grace", "2s", "--probe-address", "0", "--", "sh", script)
		if err != nil {
			return err
		}
		p.workers[name] = w // the stand-in kubelet stops it when the pod is deleted
	}
	return nil
}

// shellDemo waits until the holder of reports-leader, a shell worker, has written to its
// ledger with its token.
func (p *playground) shellDemo(ctx context.Context) error {
	l, err := waitLock(ctx, p.k8s, ns, shellLock, 60*time.Second, "a holder", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseHeld
	})
	if err != nil {
		return err
	}
	if err := waitEntries(ctx, p.shellLedgerAt, string(l.Status.HolderUID), l.Status.FencingToken, 3); err != nil {
		return fmt.Errorf("shell worker %s leads %s with token %d: %w (see %s/shell-*.log)", l.Status.Holder, shellLock, l.Status.FencingToken, err, p.dir)
	}
	p.say("%s (examples/shell-worker, POSIX sh under lockwarden-agent exec) leads %s with token %d and has written to its ledger",
		l.Status.Holder, shellLock, l.Status.FencingToken)
	return nil
}

// waitEntries waits until the ledger at url holds n entries written by uid with token.
func waitEntries(ctx context.Context, url, uid string, token int64, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		if got, err := countEntries(ctx, url, uid, token); err == nil && got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %d ledger writes within 60 s", n)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// countEntries counts the entries of the ledger at url written by a process of pod uid (its
// writer ID is the pod UID and the process's incarnation) with token.
func countEntries(ctx context.Context, url, uid string, token int64) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/entries", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var es []ledger.Entry
	if err := json.NewDecoder(resp.Body).Decode(&es); err != nil {
		return 0, err
	}
	c := 0
	for _, e := range es {
		if writer.Owner(e.Writer) == uid && e.Token == token {
			c++
		}
	}
	return c, nil
}
