package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/examples/fenced-worker/ledger"
	"github.com/lockwarden/lockwarden/internal/podsim"
	"github.com/lockwarden/lockwarden/internal/testenv"
)

const (
	ns   = "default"
	lock = "payments-leader" // from config/samples
)

// playground is everything run starts, so that close can stop it in reverse.
type playground struct {
	root, dir, kubeconfig string
	out                   io.Writer

	env       *testenv.Env
	etcd      *testenv.Etcd
	etcdLog   *os.File
	k8s       client.WithWatch
	clientset kubernetes.Interface
	kubelet   *podsim.Kubelet
	manager   *proc
	ledger    *proc
	ledgerAt  string
	// the shell workers' ledger (shell.go)
	shellLedger   *proc
	shellLedgerAt string
	// the slot workers' sharded ledger (slots.go)
	shardLedger   *proc
	shardLedgerAt string
	workers       map[string]*proc       // by pod name; not changed once the deletions run
	pods          map[string]*corev1.Pod // by pod name

	// metricsAt and probesAt are the manager's /metrics and /healthz, /readyz addresses.
	metricsAt, probesAt string

	dels     *deletions
	stopView context.CancelFunc
	viewDone sync.WaitGroup
}

// worker is the fenced-worker process of the named pod, nil if none.
func (p *playground) worker(name string) *proc { return p.workers[name] }

func (p *playground) say(format string, args ...any) { fmt.Fprintf(p.out, format+"\n", args...) }

func (p *playground) start(ctx context.Context) error {
	p.say("starting a local control plane (kube-apiserver and etcd from ./bin) ...")
	var err error
	if p.env, err = testenv.Start(testenv.LogsTo(p.dir)); err != nil {
		return err
	}
	p.kubeconfig = filepath.Join(p.dir, "kubeconfig")
	if err := p.env.Kubeconfig(p.kubeconfig); err != nil {
		return err
	}
	if p.k8s, err = p.env.Client(); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(p.env.Config)
	if err != nil {
		return err
	}
	p.clientset = cs
	p.kubelet = &podsim.Kubelet{Client: cs, Namespace: ns, Container: "worker", Image: "fenced-worker:dev",
		ServiceAccount: workerSA, PodIP: podIP}

	p.say("starting lockwarden's etcd (./bin/etcd) and the manager (./bin/lockwarden) ...")
	if p.etcdLog, err = os.Create(filepath.Join(p.dir, "etcd.log")); err != nil {
		return fmt.Errorf("create etcd log: %w", err)
	}
	if p.etcd, err = testenv.StartEtcdLogging(p.root, filepath.Join(p.dir, "etcd"), p.etcdLog); err != nil {
		return err
	}
	ports, err := testenv.FreePorts(2)
	if err != nil {
		return err
	}
	p.metricsAt, p.probesAt = fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	bin := func(name string) string { return filepath.Join(p.root, "bin", name) }
	if p.manager, err = start(p.dir, "lockwarden", bin("lockwarden"), []string{"KUBECONFIG=" + p.kubeconfig},
		"--etcd-endpoints", p.etcd.Endpoint, "--election-ttl", "5s", "--etcd-lease-ttl", "30s",
		"--metrics-bind-address", p.metricsAt, "--health-probe-bind-address", p.probesAt, "--identity", "playground-manager"); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	p.ledgerAt = "http://127.0.0.1:" + strconv.Itoa(port)
	if p.ledger, err = start(p.dir, "ledger", bin("fenced-worker"), nil, "ledger", "--listen", "127.0.0.1:"+strconv.Itoa(port)); err != nil {
		return err
	}

	p.say("installing the candidates' role and admission policy (config/rbac/lock_reader_role.yaml, config/policy) ...")
	if err := p.installIdentity(ctx); err != nil {
		return err
	}
	// The candidate pods come first, as a Deployment's pods would already run: a lock created
	// before any pod matches it is judged Valid=False NoCandidates, with a Warning Event.
	p.say("creating candidate pods; no kubelet runs here, so the playground sets their status as a kubelet would ...")
	p.workers, p.pods = map[string]*proc{}, map[string]*corev1.Pod{}
	candidates := []struct{ name, app string }{
		{"reports-0", "reports"}, {"reports-1", "reports"}, {"payments-0", "payments"}, {"payments-1", "payments"}, {"payments-2", "payments"},
	}
	for _, name := range slotPods() {
		candidates = append(candidates, struct{ name, app string }{name, slotApp})
	}
	for _, c := range candidates {
		pod, err := p.kubelet.CreateReadyPod(ctx, c.name, map[string]string{"app": c.app})
		if err != nil {
			return err
		}
		p.pods[c.name] = pod
	}

	p.say("applying config/samples; routing %s to Service %s ...", lock, routedService)
	if err := p.applySamples(ctx); err != nil {
		return err
	}
	if err := p.routeService(ctx); err != nil {
		return err
	}

	viewCtx, stopView := context.WithCancel(ctx)
	p.stopView = stopView
	v := &view{k8s: p.k8s, ns: ns, out: p.out, last: map[string]string{}}
	p.viewDone.Add(1)
	go func() {
		defer p.viewDone.Done()
		v.run(viewCtx)
	}()

	p.say("starting the workers: sh under lockwarden-agent for reports-*, fenced-worker for payments-* ...")
	if err := p.startShellWorkers(); err != nil {
		return err
	}
	for _, name := range []string{"payments-0", "payments-1", "payments-2"} {
		pod := p.pods[name]
		kubeconfig, err := p.podKubeconfig(ctx, pod)
		if err != nil {
			return err
		}
		w, err := start(p.dir, "worker-"+name, bin("fenced-worker"), []string{
			"KUBECONFIG=" + kubeconfig, "POD_NAME=" + name, "POD_UID=" + string(pod.UID),
			"LOCK_NAMESPACE=" + ns, "LOCK_NAME=" + lock, "LEDGER_URL=" + p.ledgerAt,
		}, "--probe-address", "0") // releases its term once its work stopped: the default
		if err != nil {
			return err
		}
		p.workers[name] = w
	}
	p.say("starting the slot workers: fenced-worker --shard-per-slot for %s-*, each writing to its slot's shard of a %d-shard ledger ...", slotApp, slotCount)
	if err := p.startSlotWorkers(ctx); err != nil {
		return err
	}
	p.dels = &deletions{p: p, handled: map[string]bool{}, done: map[string]time.Time{}}
	p.viewDone.Add(1)
	go func() {
		defer p.viewDone.Done()
		p.dels.run(viewCtx)
	}()
	return nil
}

// demo runs the shell worker's demo, the failover and then the slot demo (slots.go).
func (p *playground) demo(ctx context.Context) error {
	if err := p.shellDemo(ctx); err != nil {
		return err
	}
	if err := p.failoverDemo(ctx); err != nil {
		return err
	}
	return p.slotDemo(ctx)
}

// failoverDemo waits for a holder that writes, then ends it gracefully and shows the
// failover and the ledger refusing the old token.
func (p *playground) failoverDemo(ctx context.Context) error {
	first, err := waitLock(ctx, p.k8s, ns, lock, 60*time.Second, "a holder", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseHeld
	})
	if err != nil {
		return err
	}
	oldPod, oldToken, oldUID := first.Status.Holder, first.Status.FencingToken, string(first.Status.HolderUID)
	if err := p.waitWrites(ctx, oldUID, oldToken, 3); err != nil {
		return fmt.Errorf("%s leads with token %d: %w", oldPod, oldToken, err)
	}
	p.say("%s leads with token %d and has written to the ledger", oldPod, oldToken)
	if err := p.checkProbes(ctx); err != nil {
		return err
	}

	if p.workers[oldPod] == nil {
		return fmt.Errorf("holder %s is not one of the playground's workers", oldPod)
	}
	if err := p.showRoute(ctx, oldPod); err != nil {
		return err
	}
	p.say("deleting pod %s, as `kubectl delete pod %s` does; the stand-in kubelet stops its worker (SIGTERM), whose elector confirms the end of its term once its work stopped ...", oldPod, oldPod)
	deleted := time.Now()
	if err := p.kubelet.Delete(ctx, p.pods[oldPod]); err != nil {
		return err
	}
	next, err := waitLock(ctx, p.k8s, ns, lock, 60*time.Second, "a new holder", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseHeld && l.Status.Holder != oldPod && l.Status.FencingToken > oldToken
	})
	if err != nil {
		return err
	}
	p.say("new holder published %v after the deletion (polled every 50 ms); %s's term ended: %s", time.Since(deleted).Round(time.Millisecond), oldPod, endReason(next, oldToken))
	if _, err := p.dels.waitFinished(ctx, oldPod, 30*time.Second); err != nil {
		return err
	}
	if err := p.showRoute(ctx, next.Status.Holder); err != nil {
		return err
	}
	if err := p.waitWrites(ctx, string(next.Status.HolderUID), next.Status.FencingToken, 1); err != nil {
		return fmt.Errorf("%s leads with token %d: %w", next.Status.Holder, next.Status.FencingToken, err)
	}
	p.say("%s leads with token %d and has written to the ledger", next.Status.Holder, next.Status.FencingToken)

	p.say("sending a write with %s's old token %d, as a paused ex-leader waking up would ...", oldPod, oldToken)
	c := &ledger.Client{URL: p.ledgerAt, HTTP: &http.Client{Timeout: 5 * time.Second}, Name: oldPod}
	err = c.Append(ctx, oldUID, oldToken, "late write from "+oldPod)
	switch {
	case err == nil:
		return fmt.Errorf("stale write with token %d was accepted, want the ledger to refuse it", oldToken)
	case !errors.Is(err, ledger.ErrStale):
		return fmt.Errorf("stale write with token %d: %w (want the ledger to refuse it as stale)", oldToken, err)
	}
	p.say("ledger answered: %v", err)
	if err := p.showWarnings(ctx); err != nil {
		return err
	}
	p.say("failover: %s token %d -> %s token %d", oldPod, oldToken, next.Status.Holder, next.Status.FencingToken)
	p.say("ledger rejected token %d from %s", oldToken, oldPod)
	return nil
}

// waitWrites waits until the ledger holds n entries written by uid with token.
func (p *playground) waitWrites(ctx context.Context, uid string, token int64, n int) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if got, err := countEntries(ctx, p.ledgerAt, uid, token); err == nil && got >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("no %d ledger writes within 60 s (see %s/worker-*.log)", n, p.dir)
}

// close stops everything in reverse order of start.
func (p *playground) close() {
	if p.stopView != nil {
		p.stopView()
		p.viewDone.Wait()
	}
	for _, w := range p.workers {
		w.stop(5 * time.Second)
	}
	if p.ledger != nil {
		p.ledger.stop(5 * time.Second)
	}
	if p.shellLedger != nil {
		p.shellLedger.stop(5 * time.Second)
	}
	if p.shardLedger != nil {
		p.shardLedger.stop(5 * time.Second)
	}
	if p.manager != nil {
		p.manager.stop(10 * time.Second)
	}
	if p.etcd != nil {
		p.etcd.Stop()
	}
	if p.etcdLog != nil {
		_ = p.etcdLog.Close()
	}
	if p.env != nil {
		if err := p.env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "playground:", err)
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// endReason is the history's reason for the end of the term of token.
func endReason(l *lockv1.DistributedLock, token int64) string {
	for _, t := range l.Status.History {
		if t.Token == token && t.Ended != nil {
			return t.Reason
		}
	}
	return "not recorded"
}

// checkProbes reads the manager's /readyz and /metrics once, at the addresses the hint
// prints, and says what they answered.
func (p *playground) checkProbes(ctx context.Context) error {
	for _, url := range []string{"http://" + p.probesAt + "/readyz", "http://" + p.metricsAt + "/metrics"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("manager: GET %s: %w", url, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("manager: GET %s: %s", url, resp.Status)
		}
		p.say("manager: GET %s answered %s", url, resp.Status)
	}
	return nil
}

// podIP is the address the stand-in kubelet reports for a playground pod (for the routed
// Service's EndpointSlice; nothing listens on it).
func podIP(name string) string {
	var i int
	if _, err := fmt.Sscanf(name, "payments-%d", &i); err != nil {
		return ""
	}
	return fmt.Sprintf("10.0.0.%d", 10+i)
}

// showRoute waits until the routed Service's EndpointSlice lists exactly pod and says so.
func (p *playground) showRoute(ctx context.Context, pod string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var sl discoveryv1.EndpointSlice
		err := p.k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: routedService + "-lockwarden"}, &sl)
		if err == nil && len(sl.Endpoints) == 1 && sl.Endpoints[0].TargetRef != nil && sl.Endpoints[0].TargetRef.Name == pod {
			p.say("Service %s routes to %s (EndpointSlice %s: %s)", routedService, pod, sl.Name, sl.Endpoints[0].Addresses[0])
			return nil
		}
		if time.Now().After(deadline) {
			what := fmt.Sprintf("lists %d endpoints", len(sl.Endpoints))
			if err != nil {
				what = err.Error()
			}
			return fmt.Errorf("service %s does not route to %s within 10s (EndpointSlice: %s)", routedService, pod, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// applySamples applies config/samples one file (one lock) at a time, in kubectl's order, and
// sends a file again that the API server refused only because its admission policy
// dispatcher was not ready ("There can be a delay ...", testenv.RideOutConverterDelay): a
// refused file created nothing, so the output is what one kubectl apply -f prints.
func (p *playground) applySamples(ctx context.Context) error {
	files, err := filepath.Glob(filepath.Join(p.root, "config", "samples", "*.yaml"))
	if err != nil {
		return fmt.Errorf("apply config/samples: %w", err)
	}
	if len(files) == 0 {
		return errors.New("apply config/samples: no *.yaml files in config/samples")
	}
	for _, f := range files {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var stderr bytes.Buffer
			apply := exec.CommandContext(ctx, filepath.Join(p.root, "bin", "kubectl"), "--kubeconfig", p.kubeconfig, "apply", "-f", f)
			apply.Stdout, apply.Stderr = p.out, &stderr
			err := apply.Run()
			if err == nil {
				break
			}
			if !testenv.ConverterDelayText(stderr.String()) || time.Now().After(deadline) || ctx.Err() != nil {
				_, _ = os.Stderr.Write(stderr.Bytes())
				return fmt.Errorf("apply config/samples (%s): %w", filepath.Base(f), err)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return nil
}
