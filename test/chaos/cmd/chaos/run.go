package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/test/chaos"
)

const (
	lockName  = "chaos"
	podLabel  = "chaos-candidate"
	nWorkers  = 3 // an engine run's workers; a pod run has Schedule.Pods
	nManagers = 2
)

// run is one seeded run: its own namespace, lock, etcd prefix, ledger, managers and workers
// on the shared control plane and etcd cluster.
type run struct {
	h      *harness
	sched  chaos.Schedule
	ns     string
	prefix string
	dir    string

	// ledgers: one per slot of the run's lock (Schedule.Slots; one in an engine run), each
	// a process of its own; ledgerURL is slot 0's.
	ledgers    []*proc
	ledgerURLs []string
	ledgerURL  string
	managers   []*manager
	kubelet    *kubelet
	slots      []*slot
	engines    []*engineSlot // an engine run's workers (no pods, no managers)

	mu       sync.Mutex
	workers  []*workerProc // every worker process started, in order
	nextHist int
	obs      []chaos.StatusObs
	slotObs  map[int32][]chaos.StatusObs // a slot run's observations of slots 1.. (slot 0's: obs)
	slices   []chaos.SliceObs            // a routing run's EndpointSlice versions
	pods     int                         // pods created, for their IPs

	faults map[string]int
	// notInjected: the fault being injected found nothing to act on (a stall with no
	// holder), so inject does not count it
	notInjected bool
	crashes     []crash // the crash-restart faults, for CheckRestarts
	liveness    []time.Duration
	violations  []chaos.Violation
	notes       []string
}

// result is what a run reports.
type result struct {
	sched     chaos.Schedule
	faults    map[string]int
	accepted  int
	rejected  int
	ambiguous int
	// ledger names the run's ledger (ledgerName); ledgerAccepted and refused are its own
	// count of its decisions (GET /outcomes), stalls what became of the stalled writes.
	ledger         string
	ledgerAccepted int
	refused        int
	stalls         chaos.StallOutcome
	// slots is spec.slots of the run's lock; for a slot run (slots > 1) maxHolders is the most
	// pods that held valid terms at once (chaos.CheckHolders), slotRefused what each slot's
	// ledger refused, slotStalls what became of each slot's stalled writes.
	slots       int
	maxHolders  int
	slotRefused []int
	slotStalls  []chaos.StallOutcome
	// slices and routed: a routing run's EndpointSlice versions seen, and those listing a pod
	slices, routed int
	overlaps       []chaos.Overlap
	liveness       []time.Duration
	linear         string
	violations     []chaos.Violation
	saved          string
	elapsed        time.Duration
}

func (r *run) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, fmt.Sprintf("%7.3fs ", time.Since(r.h.t0).Seconds())+fmt.Sprintf(format, args...))
}

func (r *run) violate(checker, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violations = append(r.violations, chaos.Violation{Checker: checker, Detail: fmt.Sprintf(format, args...)})
}

// execute runs the schedule and checks the histories.
func (r *run) execute(ctx context.Context) (*result, error) {
	start := time.Now()
	r.faults = map[string]int{}
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, err
	}
	bg, stopBG := context.WithCancel(ctx)
	var bgWG sync.WaitGroup
	defer func() {
		stopBG()
		bgWG.Wait()
	}()
	err := r.setup(ctx, bg, &bgWG)
	if err == nil {
		err = r.inject(ctx)
	}
	outcomes, terr := r.teardown(ctx, stopBG, &bgWG)
	if err != nil {
		return nil, err
	}
	if terr != nil {
		return nil, terr
	}
	res := r.check(outcomes)
	res.elapsed = time.Since(start)
	return res, nil
}

// setup starts the ledger, the lock, the managers, the pods and their workers, and the
// background loops (status watch, kubelet), then waits for the first write.
func (r *run) setup(ctx, bg context.Context, wg *sync.WaitGroup) error {
	h := r.h
	err := r.startLedgers(ctx)
	if err != nil {
		return err
	}
	if r.sched.Engine() {
		return r.setupEngine(ctx)
	}
	if err := h.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace: %w", err)
	}
	lock := &lockv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: lockName, Namespace: r.ns},
		Spec: lockv1.DistributedLockSpec{
			Candidates:           lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"app": podLabel})},
			LeaseDurationSeconds: int32(h.timing.Lease / time.Second),
			LockDelaySeconds:     ptr.To(int32(h.timing.LockDelay / time.Second)),
		},
	}
	if n := r.sched.Slots(); n > 1 {
		lock.Spec.Slots = int32(n)
	}
	if r.sched.Routing() {
		if err := r.setupRouting(ctx, lock); err != nil {
			return err
		}
		wg.Go(func() { r.watchSlices(bg) })
	}
	if err := h.k8s.Create(ctx, lock); err != nil {
		return fmt.Errorf("create lock: %w", err)
	}
	wg.Go(func() { r.watchStatus(bg) })

	var fps []string
	counts := r.sched.Counts()
	if counts[chaos.DropStatus] > 0 {
		fps = append(fps, "drop-status-after-grant=1")
	}
	if counts[chaos.LoseRelease] > 0 {
		fps = append(fps, "lose-release-reply=1")
	}
	for i := range nManagers {
		m := &manager{id: fmt.Sprintf("manager-%d", i), dir: r.dir, bin: h.bins.manager}
		r.managers = append(r.managers, m) // stopped by teardown, proxies and gate included
		if err := m.connect(r.h, r.prefix, "LOCKWARDEN_FAILPOINTS="+strings.Join(fps, ",")); err != nil {
			return err
		}
		m.start()
	}

	r.kubelet = &kubelet{cs: h.cs, ns: r.ns, http: &http.Client{}, shape: shapeFor(r.sched), restart: r.startWorker}
	for i := range r.sched.Pods() {
		if err := r.addSlot(ctx, fmt.Sprintf("w-%d", i), fmt.Sprintf("%s-node-%d", r.ns, i)); err != nil {
			return err
		}
	}
	r.kubelet.slots = r.slots
	wg.Go(func() { r.kubelet.run(bg) })
	if _, err := r.waitProgress(ctx, 60*time.Second); err != nil {
		return fmt.Errorf("no first write: %w", err)
	}
	return nil
}

// addSlot adds a candidate pod name to the run: its API server proxy, its Node, its pod and
// the worker that plays it.
func (r *run) addSlot(ctx context.Context, name, node string) error {
	s := &slot{name: name, node: node}
	var err error
	if s.api, err = apiproxy.Start(r.h.cp.Config, apiproxy.Options{}); err != nil {
		return err
	}
	r.slots = append(r.slots, s) // its proxy closed by teardown
	s.kcfg = filepath.Join(r.dir, s.name+".kubeconfig")
	if err := writeKubeconfig(s.kcfg, s.api); err != nil {
		return err
	}
	if err := r.kubelet.createNode(ctx, s); err != nil {
		return err
	}
	return r.startPod(ctx, s)
}

// shapeFor is how a run's pods are built, from the schedule's explicit shape
// (chaos.Schedule.Shape, set by its first fault): restartPolicy Never, so that a worker that
// exits ends its pod (phase Failed or Succeeded, as the kubelet writes for such a pod);
// restartPolicy Always (a StatefulSet's) for the single-container pod whose crash is restarted
// (crash-restart: the restart proves the old process gone); or the worker as a native sidecar
// (crash-restart-sidecar, sidecar-delete: no proof).
func shapeFor(s chaos.Schedule) podShape {
	switch s.Shape() {
	case chaos.ShapeRestart:
		return podShape{policy: corev1.RestartPolicyAlways}
	case chaos.ShapeSidecar:
		return podShape{policy: corev1.RestartPolicyNever, sidecar: true}
	}
	return podShape{policy: corev1.RestartPolicyNever}
}

// proof reports whether a restart of the worker proves the old process gone
// (controllers/restart.go restartProof): one regular container, no native sidecar.
func (s podShape) proof() bool { return !s.sidecar }

// startPod creates the slot's pod (new UID) and a worker process to play it.
func (r *run) startPod(ctx context.Context, s *slot) error {
	pod, err := r.kubelet.createPod(ctx, s, map[string]string{"app": podLabel})
	if err != nil {
		return err
	}
	w, err := r.startWorker(ctx, s, pod)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.pods++
	ip := fmt.Sprintf("10.1.%d.%d", r.pods/250, 1+r.pods%250) // a new pod, a new IP, as a CNI hands out
	r.mu.Unlock()
	s.mu.Lock()
	s.pod, s.w, s.reported, s.fails, s.started, s.app, s.ip = pod, w, "", 0, metav1.Now(), newContainerID(), ip
	s.mu.Unlock()
	return nil
}

// startWorker starts a worker process playing pod: a new pod's, or a restart under the
// same UID.
func (r *run) startWorker(_ context.Context, s *slot, pod *corev1.Pod) (*workerProc, error) {
	ports, err := testenv.FreePorts(1)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.nextHist++
	n := r.nextHist
	r.mu.Unlock()
	w := &workerProc{pod: s.name, uid: string(pod.UID), container: newContainerID(), probe: "127.0.0.1:" + strconv.Itoa(ports[0]),
		history: filepath.Join(r.dir, fmt.Sprintf("history-%s-%d.jsonl", s.name, n))}
	bin, args := r.h.bins.worker, []string{"--probe-address", w.probe, "--history", w.history}
	switch r.sched.Worker() {
	case chaos.WorkerResourceLock:
		args = append(args, "--mode", chaos.WorkerResourceLock)
	case chaos.WorkerAgent:
		// The agent leads and serves /readyz; its child writes the ledger. No release on stop:
		// a holder-confirmed release ends the term while the agent still runs, which
		// CheckHandoffs (rightly) reads as an unproven attestation.
		bin, args = r.h.bins.agent, []string{"exec", "--lock", lockName, "--namespace", r.ns, "--kubeconfig", s.kcfg,
			"--grace", "1s", "--probe-address", w.probe, "--release-on-stop=false", "--",
			r.h.bins.worker, "--child", "--history", w.history}
	}
	env := []string{
		"KUBECONFIG=" + s.kcfg, "POD_NAME=" + s.name, "POD_UID=" + w.uid,
		"LOCK_NAMESPACE=" + r.ns, "LOCK_NAME=" + lockName, "LEDGER_URL=" + r.ledgerURL,
	}
	if len(r.ledgerURLs) > 1 {
		env = append(env, "LEDGER_URLS="+strings.Join(r.ledgerURLs, ","))
	}
	w.p, err = startProc(r.dir, fmt.Sprintf("worker-%s-%d", s.name, n), bin, env, args...)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.workers = append(r.workers, w)
	r.mu.Unlock()
	return w, nil
}

// watchStatus records every version of the lock's status it sees, in resourceVersion order.
func (r *run) watchStatus(ctx context.Context) { watchLocks(ctx, r.h.k8s, r.ns, r.record) }

// watchLocks calls record with every version of a DistributedLock in ns that it sees, until
// ctx ends, watching again (from the last version, or anew after 410 Gone) when a watch ends.
func watchLocks(ctx context.Context, k8s client.WithWatch, ns string, record func(*lockv1.DistributedLock)) {
	rv := ""
	for ctx.Err() == nil {
		var list lockv1.DistributedLockList
		w, err := k8s.Watch(ctx, &list, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: false}})
		if err != nil {
			rv = ""
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			l, ok := ev.Object.(*lockv1.DistributedLock)
			if !ok {
				if st, ok := ev.Object.(*metav1.Status); ok && st.Code == http.StatusGone {
					rv = ""
				}
				continue
			}
			rv = l.ResourceVersion
			record(l)
		}
		w.Stop()
	}
}

// record keeps one observed version of the lock: slot 0's view (the status's own fields) in
// obs, and in a slot run every listed slot's view in slotObs.
func (r *run) record(l *lockv1.DistributedLock) {
	v, _ := strconv.ParseUint(l.ResourceVersion, 10, 64)
	views := chaos.ObserveSlots(v, chaos.Mono(), &l.Status)
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.obs); n > 0 && r.obs[n-1].RV >= v {
		return // a replay after a re-watch
	}
	r.obs = append(r.obs, views[0])
	for i, o := range views {
		if i == 0 {
			continue
		}
		if r.slotObs == nil {
			r.slotObs = map[int32][]chaos.StatusObs{}
		}
		r.slotObs[i] = append(r.slotObs[i], o)
	}
}

// getJSON decodes the JSON answer of GET url into v, within limit.
func getJSON(ctx context.Context, url string, limit time.Duration, v any) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// waitProgress waits until a ledger (in a slot run: any slot's) accepts an append it had not
// decided before the call, and returns when it saw it (CLOCK_MONOTONIC).
func (r *run) waitProgress(ctx context.Context, limit time.Duration) (int64, error) {
	before, err := r.allOutcomes(ctx)
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		sleepCtx(ctx, 50*time.Millisecond)
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		now, err := r.allOutcomes(ctx)
		if err != nil {
			continue
		}
		for i := range now {
			for _, o := range now[i][min(len(before[i]), len(now[i])):] {
				if o.Accepted && o.Op == "append" {
					return chaos.Mono(), nil
				}
			}
		}
	}
	return 0, fmt.Errorf("no accepted write within %v", limit)
}

// holderSlot returns the slot whose pod is the published holder, else the first slot with
// a running worker.
func (r *run) holderSlot(ctx context.Context) *slot {
	var l lockv1.DistributedLock
	if err := r.h.k8s.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: lockName}, &l); err == nil {
		for _, s := range r.slots {
			s.mu.Lock()
			match := s.pod != nil && s.pod.UID == l.Status.HolderUID
			s.mu.Unlock()
			if match {
				return s
			}
		}
	}
	for _, s := range r.slots {
		s.mu.Lock()
		ok := s.w != nil && s.w.p.running()
		s.mu.Unlock()
		if ok {
			return s
		}
	}
	return r.slots[0]
}

// teardown stops everything the run started and returns the ledger's decisions.
func (r *run) teardown(ctx context.Context, stopBG context.CancelFunc, wg *sync.WaitGroup) ([][]chaos.Outcome, error) {
	ctx = context.WithoutCancel(ctx) // clean up after an interrupt too
	var errs []error
	// The kubelet first: it restarts crashed workers, and would restart stopped ones.
	stopBG()
	wg.Wait()
	r.mu.Lock()
	workers := append([]*workerProc(nil), r.workers...)
	r.mu.Unlock()
	for _, w := range workers {
		w.p.stop(5 * time.Second)
	}
	for _, m := range r.managers {
		m.stop()
	}
	outs, err := r.allOutcomes(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, l := range r.ledgers {
		l.stop(5 * time.Second)
	}
	for _, s := range r.slots {
		_ = s.api.Close()
	}
	for _, s := range r.engines {
		for _, p := range s.proxies {
			p.close()
		}
	}
	if err := r.h.etcd.healAll(); err != nil {
		errs = append(errs, err)
	}
	if r.sched.Engine() {
		return outs, errors.Join(errs...) // no Kubernetes objects
	}
	// Leave nothing for the next run's managers to reconcile.
	var l lockv1.DistributedLock
	if err := r.h.k8s.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: lockName}, &l); err == nil {
		l.Finalizers = nil
		if err := r.h.k8s.Update(ctx, &l); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
		if err := r.h.k8s.Delete(ctx, &l); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, err)
		}
	}
	if err := r.h.k8s.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(r.ns), client.GracePeriodSeconds(0)); err != nil {
		errs = append(errs, err)
	}
	if r.kubelet != nil {
		if err := r.kubelet.deleteNodes(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return outs, errors.Join(errs...)
}

func writeKubeconfig(path string, p *apiproxy.Proxy) error {
	cfg := p.Config()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["chaos"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["chaos"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["chaos"] = &clientcmdapi.Context{Cluster: "chaos", AuthInfo: "chaos"}
	kc.CurrentContext = "chaos"
	return clientcmd.WriteToFile(*kc, path)
}

func waitHTTP(ctx context.Context, url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
