package main

import (
	"context"
	"fmt"
	"github.com/lockwarden/lockwarden/internal/podsim"
	"io"
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
	firstHeld     time.Duration // manager start -> the first lock Held
	thirds        [3]time.Time  // when a third, two thirds and all of the locks were Held
	raw           *rawResult    // the API server's status-write rate, same stack, before
	cost          *grantCost    // what granting cost; nil when the manager exited
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

// heldCounter follows the phase of every lock in a namespace through one list and watch,
// and records when the first lock and the target-th were seen Held.
type heldCounter struct {
	mu           sync.Mutex
	phases       map[string]lockv1.Phase
	held         int
	target       int
	firstAt, all time.Time
	thirds       [3]time.Time // when a third, two thirds and all of target were Held
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
		now := time.Now()
		if h.firstAt.IsZero() {
			h.firstAt = now
		}
		for k := range h.thirds {
			if h.thirds[k].IsZero() && 3*h.held >= (k+1)*h.target {
				h.thirds[k] = now
			}
		}
		if h.held >= h.target && h.all.IsZero() {
			h.all = now
		}
	}
}

// times returns when the first lock and the target-th were seen Held (zero: not yet).
func (h *heldCounter) times() (first, all time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.firstAt, h.all
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
	fmt.Fprintf(progress, "  %d pods created in %v; measuring the raw status-write rate on %d locks\n", n*candidatesPerLock, podsCreated.Round(time.Second), n)
	if res.raw, err = measureRaw(ctx, s, n); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "  raw status writes: %.0f/s at concurrency %d\n", res.raw.rate, res.raw.concurrency)
	if err := installPolicy(ctx, s, o.finalizerPolicy); err != nil {
		return nil, err
	}
	t = time.Now()
	if err := parallel(n, 32, func(i int) error {
		return s.createLock(ctx, ns, fmt.Sprintf("lock-%d", i), timingDefault.lease)
	}); err != nil {
		return nil, err
	}
	res.setup = podsCreated + time.Since(t)
	fmt.Fprintf(progress, "  %d locks, %d pods created in %v\n", n, n*candidatesPerLock, res.setup.Round(time.Second))

	wc, err := client.NewWithWatch(s.env.Config, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	h := &heldCounter{phases: map[string]lockv1.Phase{}, target: n}
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
	before, err := takeCost(ctx, s)
	if err != nil {
		return nil, err
	}
	var profWG sync.WaitGroup
	defer profWG.Wait()
	if o.pprofDir != "" {
		profWG.Go(func() {
			for first, _ := h.times(); first.IsZero(); first, _ = h.times() {
				select {
				case <-time.After(20 * time.Millisecond):
				case <-ctx.Done():
					return
				}
			}
			res.profiles = captureCPU(ctx, s, o.pprofDir, fmt.Sprintf("scale-%d", n), profileWindow)
		})
	}
	deadline := t0.Add(o.scaleTimeout)
	for {
		c := h.count()
		res.curve = append(res.curve, plotter.XY{X: time.Since(t0).Seconds(), Y: float64(c)})
		if c >= n {
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
	first, all := h.times()
	h.mu.Lock()
	res.thirds = h.thirds
	h.mu.Unlock()
	if !first.IsZero() {
		res.firstHeld = first.Sub(t0)
	}
	if !all.IsZero() {
		res.allHeld = all.Sub(t0)
	}
	fmt.Fprintf(progress, "  %d locks: %d held after %v\n", n, res.heldAtEnd, time.Since(t0).Round(100*time.Millisecond))
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
	after, err := takeCost(ctx, s)
	if err != nil {
		return nil, err
	}
	res.cost = costBetween(before, after)
	fmt.Fprintf(progress, "  %d locks, per new lock: %s\n", n, res.cost.describe(n))
	profWG.Wait()
	if res.profiles != nil {
		res.profiles.summarise()
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
	s.stopManager()
	if err := measureRawAfter(ctx, s, ns, res.raw); err != nil {
		return nil, err
	}
	fmt.Fprintf(progress, "  raw status writes after the run: %.0f/s at concurrency %d\n", res.raw.after, res.raw.concurrency)
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

// fractionCurve scales a held-count curve to fractions of n.
func fractionCurve(c plotter.XYs, n int) plotter.XYs {
	out := make(plotter.XYs, len(c))
	for i, p := range c {
		out[i] = plotter.XY{X: p.X, Y: p.Y / float64(n)}
	}
	return out
}
