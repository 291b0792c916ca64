package main

import (
	"context"
	"fmt"
	"github.com/lockwarden/lockwarden/internal/podsim"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"gonum.org/v1/plot/plotter"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// scaleResult is one lock count.
type scaleResult struct {
	n             int
	setup         time.Duration // creating the pods and locks, before the manager starts
	allHeld       time.Duration // manager start -> every lock Held; 0 when not reached
	heldAtEnd     int
	curve         plotter.XYs // seconds since manager start -> locks Held
	reconcileP99  float64     // seconds, controller_runtime_reconcile_time_seconds
	reconciles    float64     // reconciles completed (histogram count)
	reconcileRate float64     // reconciles per second in the steady window
	reconcileErrs float64     // controller_runtime_reconcile_errors_total over the run
	rss, rssPeak  int64
	steady        *window
	window        time.Duration
	exited        string // the manager's last log line when it exited during the run
	profiles      *cpuProfiles
	foot          *scaleFootprints // nil when the manager exited
}

// heldCounter follows the phase of every lock in a namespace through one list and watch.
type heldCounter struct {
	mu     sync.Mutex
	phases map[string]lockv1.Phase
	held   int
}

func (h *heldCounter) set(name string, p lockv1.Phase) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.phases[name] == lockv1.PhaseHeld {
		h.held--
	}
	h.phases[name] = p
	if p == lockv1.PhaseHeld {
		h.held++
	}
}

func (h *heldCounter) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.held
}

// follow lists and watches the namespace's locks until ctx ends; done closes on return.
func follow(ctx context.Context, wc client.WithWatch, ns string, h *heldCounter) (<-chan struct{}, error) {
	var list lockv1.DistributedLockList
	if err := wc.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, fmt.Errorf("list locks: %w", err)
	}
	for i := range list.Items {
		h.set(list.Items[i].Name, list.Items[i].Status.Phase)
	}
	rv := list.ResourceVersion
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			w, err := wc.Watch(ctx, &lockv1.DistributedLockList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			for ev := range w.ResultChan() {
				l, ok := ev.Object.(*lockv1.DistributedLock)
				if !ok {
					continue
				}
				rv = l.ResourceVersion
				switch ev.Type {
				case watch.Added, watch.Modified:
					h.set(l.Name, l.Status.Phase)
				case watch.Deleted:
					h.set(l.Name, "")
				}
			}
			w.Stop()
		}
	}()
	return done, nil
}

func scaleRun(ctx context.Context, o options, n int, progress io.Writer) (*scaleResult, error) {
	s, err := newStack(ctx)
	if err != nil {
		return nil, err
	}
	defer s.close()
	const ns = "scale"
	if err := s.namespace(ctx, ns); err != nil {
		return nil, err
	}
	res := &scaleResult{n: n, window: min(30*time.Second, max(o.loadDuration/2, 10*time.Second))}
	var extra []string
	if o.reconciles > 0 {
		extra = append(extra, "--max-concurrent-reconciles", fmt.Sprint(o.reconciles))
	}
	// The footprint baseline: a manager on the empty cluster, then with the pods cached.
	foot := &scaleFootprints{}
	if err := s.startManager(ctx, extra...); err != nil {
		return nil, fmt.Errorf("start baseline manager: %w", err)
	}
	if err := settle(ctx, 5*time.Second); err != nil {
		return nil, err
	}
	if foot.empty, err = readFootprint(ctx, s, fmt.Sprintf("scale-%d-empty", n)); err != nil {
		return nil, fmt.Errorf("empty manager: %w", err)
	}
	k := &podsim.Kubelet{Client: s.bulk, Namespace: ns}
	t := time.Now()
	if err := parallel(n*candidatesPerLock, 32, func(i int) error {
		name := fmt.Sprintf("lock-%d", i/candidatesPerLock)
		_, err := k.CreateReadyPod(ctx, fmt.Sprintf("%s-p%d", name, i%candidatesPerLock), map[string]string{"lock": name})
		return err
	}); err != nil {
		return nil, err
	}
	podsCreated := time.Since(t)
	if err := settle(ctx, 10*time.Second); err != nil { // the watch events of the last pods
		return nil, err
	}
	if foot.pods, err = readFootprint(ctx, s, fmt.Sprintf("scale-%d-pods", n)); err != nil {
		return nil, fmt.Errorf("manager with pods cached: %w", err)
	}
	s.stopManager()
	t = time.Now().Add(-podsCreated) // setup counts the creations, not the baseline's waits
	if err := parallel(n, 32, func(i int) error {
		return s.createLock(ctx, ns, fmt.Sprintf("lock-%d", i), timingDefault.lease)
	}); err != nil {
		return nil, err
	}
	res.setup = time.Since(t)
	fmt.Fprintf(progress, "  %d locks, %d pods created in %v\n", n, n*candidatesPerLock, res.setup.Round(time.Second))

	wc, err := client.NewWithWatch(s.env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	h := &heldCounter{phases: map[string]lockv1.Phase{}}
	fctx, stopFollow := context.WithCancel(ctx)
	followDone, err := follow(fctx, wc, ns, h)
	if err != nil {
		stopFollow()
		return nil, err
	}
	defer func() {
		stopFollow()
		<-followDone
	}()

	t0 := time.Now()
	if err := s.startManager(ctx, extra...); err != nil {
		return nil, err
	}
	var profWG sync.WaitGroup
	defer profWG.Wait()
	if o.pprofDir != "" && n == slices.Max(o.scale) {
		profWG.Go(func() {
			select {
			case <-time.After(3 * time.Second): // past the informers' first list
			case <-ctx.Done():
				return
			}
			res.profiles = captureCPU(ctx, s, o.pprofDir, fmt.Sprintf("scale-%d", n), 20*time.Second)
		})
	}
	deadline := t0.Add(o.scaleTimeout)
	for {
		c := h.count()
		res.curve = append(res.curve, plotter.XY{X: time.Since(t0).Seconds(), Y: float64(c)})
		if c >= n {
			res.allHeld = time.Since(t0)
			break
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-time.After(250 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	res.heldAtEnd = h.count()
	fmt.Fprintf(progress, "  %d locks: %d held after %v\n", n, res.heldAtEnd, time.Since(t0).Round(100*time.Millisecond))
	profWG.Wait()
	if res.profiles != nil {
		res.profiles.summarise()
	}
	if err := settle(ctx, 5*time.Second); err != nil {
		return nil, err
	}
	select {
	case <-s.mgr.exited:
		lines := strings.Split(strings.TrimSpace(tail(s.mgr.log.Name())), "\n")
		res.exited = lines[len(lines)-1]
		res.steady = &window{}
		fmt.Fprintf(progress, "  %d locks: the manager exited: %s\n", n, res.exited)
		return res, nil
	default:
	}
	m0, err := s.managerMetrics(ctx)
	if err != nil {
		return nil, err
	}
	if res.steady, err = measureWindow(ctx, s, res.window); err != nil {
		return nil, err
	}
	m1, err := s.managerMetrics(ctx)
	if err != nil {
		return nil, err
	}
	res.reconcileP99, res.reconciles = histogramQuantile(0.99, m1, "controller_runtime_reconcile_time_seconds", nil)
	res.reconcileErrs = sum(m1, "controller_runtime_reconcile_errors_total", nil)
	res.reconcileRate = (sum(m1, "controller_runtime_reconcile_total", nil) - sum(m0, "controller_runtime_reconcile_total", nil)) / res.window.Seconds()
	if res.rss, res.rssPeak, err = rss(s.managerPID()); err != nil {
		return nil, err
	}
	if foot.held, err = readFootprint(ctx, s, fmt.Sprintf("scale-%d-held", n)); err != nil {
		return nil, fmt.Errorf("manager with every lock held: %w", err)
	}
	res.foot = foot
	return res, nil
}

// runScaleSection measures section 5.
func runScaleSection(ctx context.Context, o options, rep *report, progress io.Writer) error {
	var results []*scaleResult
	for _, n := range o.scale {
		r, err := scaleRun(ctx, o, n, progress)
		if err != nil {
			return fmt.Errorf("%d locks: %w", n, err)
		}
		results = append(results, r)
	}
	return rep.scaleSection(results)
}

func (r *report) scaleSection(results []*scaleResult) error {
	var b strings.Builder
	reconciles := "its default (4)"
	if r.o.reconciles > 0 {
		reconciles = fmt.Sprint(r.o.reconciles)
	}
	b.WriteString(r.header(
		fmt.Sprintf("a fresh control plane per row; a baseline bin/lockwarden is read on the empty cluster and again with 3N Ready pods (3 per lock) created and cached, then stopped (the pods' creation is slower with it running); N DistributedLocks (leaseDurationSeconds 15, OldestReady) are created with no manager running; then the measured bin/lockwarden starts (--max-concurrent-reconciles %s) and the clock runs from its start to the moment the bench's watch has seen every lock with phase Held (given up after %v)", reconciles, r.o.scaleTimeout),
		"no pkg/leadership electors run here (the controller needs only the pods), so the pods' confirming reads per held lock are those measured in section 4 (3 candidates x 1 per L/3 = 0.6/s at L = 15 s)",
		"after that, 5-10 s of settling, then a steady-state window: API writes, lockwarden's etcd traffic, the manager's reconciles; reconcile p99 from the manager's controller_runtime_reconcile_time_seconds over the whole run; RSS from /proc/<pid>/status of the manager (VmRSS at the end, VmHWM peak)",
	))
	var rows [][]string
	goalHeld, goalRSS, goalWrites := true, true, true
	var names []string
	var curves []plotter.XYs
	found, exitedAt10k := false, false
	for _, x := range results {
		held := seconds(x.allHeld)
		if x.allHeld == 0 {
			held = fmt.Sprintf("not reached: %d of %d after %v", x.heldAtEnd, x.n, r.o.scaleTimeout)
		}
		if x.exited != "" {
			rows = append(rows, []string{fmt.Sprint(x.n), seconds(x.setup), held, "n/a", "n/a", "n/a", "n/a (exited)", "n/a", "n/a", "n/a", "n/a"})
			names = append(names, fmt.Sprintf("%d locks", x.n))
			curves = append(curves, fractionCurve(x.curve, x.n))
			if x.n >= 10000 {
				found, goalHeld, exitedAt10k = true, false, true
			}
			continue
		}
		p99 := "n/a"
		if !math.IsNaN(x.reconcileP99) {
			p99 = ms(time.Duration(x.reconcileP99 * float64(time.Second)))
		}
		w := x.steady
		etcdTotal := total(w.lwEtcd)
		rows = append(rows, []string{
			fmt.Sprint(x.n), seconds(x.setup), held, p99, fmt.Sprintf("%.0f", x.reconcileRate), fmt.Sprintf("%.0f", x.reconcileErrs),
			fmt.Sprintf("%.0f / %.0f", float64(x.rss)/(1<<20), float64(x.rssPeak)/(1<<20)),
			fmt.Sprintf("%.2f", w.writes()), fmt.Sprintf("%.2f", w.keepalives), fmt.Sprintf("%.0f", etcdTotal),
			fmt.Sprintf("%.2f", etcdTotal/float64(x.n)),
		})
		if x.n >= 10000 {
			found = true
			goalHeld = goalHeld && x.allHeld > 0 && x.allHeld <= time.Minute
			goalRSS = goalRSS && x.rssPeak < 1<<30
			goalWrites = goalWrites && w.writes() < 1
		}
		names = append(names, fmt.Sprintf("%d locks", x.n))
		curves = append(curves, fractionCurve(x.curve, x.n))
	}
	b.WriteString(table([]string{"locks", "setup: pods+locks created (s)", "manager start -> all Held (s)", "reconcile p99 (ms)", "reconciles/s, steady", "reconcile errors", "manager RSS MiB (now / peak)", "API writes/s, steady", "etcd keepalives/s", "lockwarden etcd requests/s, steady", "etcd requests/s per held lock"}, rows))
	if err := linePlot(r.o.img, "scale.png", "Scale: locks Held after the manager starts", "seconds since the manager started", "fraction of locks Held", names, curves); err != nil {
		return err
	}
	b.WriteString(footprintTables(results))
	b.WriteString(r.imgRef("scale.png", "fraction of locks held over time"))
	for _, x := range results {
		if x.exited != "" {
			fmt.Fprintf(&b, "- %d locks: **the manager exited during the run**, %d locks held; its last log line: `%s`\n", x.n, x.heldAtEnd, x.exited)
			continue
		}
		var parts []string
		for _, k := range sortedKeys(x.steady.lwEtcd) {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, x.steady.lwEtcd[k]))
		}
		fmt.Fprintf(&b, "- %d locks, lockwarden's etcd by gRPC method in the steady window (per second): %s\n", x.n, strings.Join(parts, ", "))
	}
	b.WriteString("\n")
	for _, x := range results {
		if perLock := total(x.steady.lwEtcd) / float64(max(x.heldAtEnd, 1)); x.exited == "" && x.heldAtEnd > 0 && perLock > 1 {
			fmt.Fprintf(&b, "**Defect seen here** (%d locks): with %d locks held the manager completed %.0f reconciles/s in steady state "+
				"and lockwarden's etcd served %.0f requests/s (%.1f per held lock), where the design expects ~0 per lock: every "+
				"held lock is reconciled again about every 10 ms, which keeps the --max-concurrent-reconciles workers busy "+
				"and starves the locks still waiting for their first grant.\n\n",
				x.n, x.heldAtEnd, x.reconcileRate, total(x.steady.lwEtcd), perLock)
		}
	}
	if found {
		if exitedAt10k {
			fmt.Fprintf(&b, "Goals at 10,000 locks: all held within 60 s: %s (the manager exited); RSS under 1 GiB and steady-state API writes ~0: not measured (the manager exited).\n\n", metGoal(goalHeld))
		} else {
			fmt.Fprintf(&b, "Goals at 10,000 locks: all held within 60 s: %s; RSS under 1 GiB: %s; steady-state API writes ~0 (under 1/s): %s.\n\n", metGoal(goalHeld), metGoal(goalRSS), metGoal(goalWrites))
		}
	} else {
		b.WriteString("Goals at 10,000 locks: not measured in this run (smaller counts only).\n\n")
	}
	if len(results) >= 2 {
		a, z := results[0], results[len(results)-1]
		if a.allHeld > 0 && z.allHeld > 0 {
			fmt.Fprintf(&b, "Ratio: %d locks took %s x as long as %d locks to be held (%s x the locks).\n\n",
				z.n, fmtRatio(ratio(z.allHeld, a.allHeld)), a.n, fmtRatio(float64(z.n)/float64(a.n)))
		}
	}
	for _, x := range results {
		if p := x.profiles; p != nil {
			fmt.Fprintf(&b, "CPU profiles over %v while %d locks were being granted (from 3 s after the manager started; `go tool pprof -top -cum`, the first 25 lines)", p.window, x.n)
			if p.err != nil {
				fmt.Fprintf(&b, "; capture failed in part: %v", p.err)
			}
			b.WriteString(":\n\n")
			for _, part := range []struct{ what, file, top string }{{"kube-apiserver", p.apiserver, p.apiserverTop}, {"lockwarden manager", p.manager, p.mgrTop}} {
				if part.top == "" {
					continue
				}
				fmt.Fprintf(&b, "<details><summary>%s (%s)</summary>\n\n```\n%s\n```\n</details>\n\n", part.what, part.file, part.top)
			}
		}
	}
	b.WriteString("What limits the number: a new lock costs two writes of the DistributedLock (the finalizer, then the status " +
		"with the grant) and one Event, plus one etcd read and one guarded etcd transaction; the reconciles run " +
		"--max-concurrent-reconciles at a time. With every core busy (kube-apiserver, its etcd, lockwarden's etcd and the " +
		"manager share 2 cores here), the API server's custom-resource update path (decode, schema coercion, validation, " +
		"its etcd transaction) is the largest consumer, as the profiles above show when -pprof is given; more reconcile " +
		"workers do not help once it is saturated. In steady state the etcd requests per held lock show how often held " +
		"locks are reconciled again (design: only the controller-wide keepalive, i.e. ~0 per lock).\n")
	r.add(5, b.String())
	return nil
}

// fractionCurve scales a held-count curve to fractions of n.
func fractionCurve(c plotter.XYs, n int) plotter.XYs {
	out := make(plotter.XYs, len(c))
	for i, p := range c {
		out[i] = plotter.XY{X: p.X, Y: p.Y / float64(n)}
	}
	return out
}
