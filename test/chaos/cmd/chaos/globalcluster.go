package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// gcluster is one cluster of a global run: its part is a run (namespace, pods, workers, the
// stand-in kubelet) on its own control plane, plus its manager and what its lock's status
// showed.
type gcluster struct {
	name string
	r    *run
	mgr  *manager

	stopBG context.CancelFunc
	bgWG   sync.WaitGroup

	mu   sync.Mutex
	obs  []chaos.GlobalObs
	last string // the last status summary noted on the timeline
}

// setup creates the cluster's namespace and Global lock, starts its manager, its pods and
// their workers, the kubelet and the status watch.
func (c *gcluster) setup(ctx, bg context.Context, g *grun) error {
	r, h := c.r, c.r.h
	if err := h.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s: create namespace: %w", c.name, err)
	}
	lock := &lockv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: lockName, Namespace: r.ns},
		Spec: lockv1.DistributedLockSpec{
			Candidates:           lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"app": podLabel})},
			LeaseDurationSeconds: int32(g.g.timing.Lease / time.Second),
			LockDelaySeconds:     ptr.To(int32(g.g.timing.LockDelay / time.Second)),
			Scope:                lockv1.ScopeGlobal,
			GlobalName:           g.globalName,
		},
	}
	if err := h.k8s.Create(ctx, lock); err != nil {
		return fmt.Errorf("%s: create lock: %w", c.name, err)
	}
	c.bgWG.Go(func() { watchLocks(bg, h.k8s, r.ns, func(l *lockv1.DistributedLock) { c.record(l, g) }) })

	m := &manager{id: "manager-" + c.name, dir: r.dir, bin: h.bins.manager}
	c.mgr = m // stopped by teardown, proxies and gate included
	if err := m.connect(h, r.prefix); err != nil {
		return err
	}
	// debug: the global reconciler logs every step it decides, and why (the run's record)
	m.args = append(m.args, "--cluster-name", c.name, "--global-etcd-prefix", g.globalPrefix, "--zap-log-level=debug")
	m.start()

	r.kubelet = &kubelet{cs: h.cs, ns: r.ns, http: &http.Client{}, shape: podShape{policy: corev1.RestartPolicyNever}, restart: r.startWorker,
		reported: func(s *slot, pod *corev1.Pod, want string) {
			g.note("%s pod %s (%s) reported %s", c.name, s.name, pod.UID, want)
		}}
	for i := range globalPods {
		if err := r.addSlot(ctx, fmt.Sprintf("w-%d", i), fmt.Sprintf("%s-%s-node-%d", r.ns, c.name, i)); err != nil {
			return err
		}
	}
	r.kubelet.slots = r.slots
	c.bgWG.Go(func() { r.kubelet.run(bg) })
	return nil
}

// record keeps one observed version of the lock.
func (c *gcluster) record(l *lockv1.DistributedLock, g *grun) {
	v, _ := strconv.ParseUint(l.ResourceVersion, 10, 64)
	st := &l.Status
	o := chaos.GlobalObs{Cluster: c.name, RV: v, Phase: string(st.Phase), Holder: st.Holder, HolderUID: string(st.HolderUID),
		GlobalCluster: st.GlobalCluster, GlobalHolderUID: string(st.GlobalHolderUID), Round: st.GlobalRound, GlobalToken: st.GlobalToken,
		Delay: st.GlobalLockDelaySeconds, Token: st.FencingToken, MaxToken: st.MaxFencingToken, Mono: chaos.Mono()}
	summary := fmt.Sprintf("%s status: phase %s globalCluster %q holder %q token %d globalToken %d", c.name, o.Phase, o.GlobalCluster, o.Holder, o.Token, o.GlobalToken)
	c.mu.Lock()
	if n := len(c.obs); n > 0 && c.obs[n-1].RV >= v {
		c.mu.Unlock()
		return // a replay after a re-watch
	}
	c.obs = append(c.obs, o)
	changed := summary != c.last
	c.last = summary
	c.mu.Unlock()
	if changed {
		g.note("%s (round %d)", summary, o.Round)
	}
}

// observations returns what the status watch recorded.
func (c *gcluster) observations() []chaos.GlobalObs {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]chaos.GlobalObs(nil), c.obs...)
}

// lastRound is the highest round the cluster's status published for token, Held by its own
// pod, as seen before the instant before (CLOCK_MONOTONIC ns); 0 for none.
func (c *gcluster) lastRound(token, before int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var round int64
	for _, o := range c.obs {
		if o.Mono < before && o.Phase == "Held" && o.GlobalCluster == c.name && o.GlobalHolderUID != "" && o.GlobalToken == token {
			round = max(round, o.Round)
		}
	}
	return round
}

// status reads the cluster's lock now.
func (c *gcluster) status(ctx context.Context) (lockv1.DistributedLockStatus, error) {
	var l lockv1.DistributedLock
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.r.h.k8s.Get(ctx, client.ObjectKey{Namespace: c.r.ns, Name: lockName}, &l); err != nil {
		return lockv1.DistributedLockStatus{}, err
	}
	return l.Status, nil
}

// holderSlot returns the slot whose pod is the published global holder, nil when none is.
func (c *gcluster) holderSlot(uid string) *slot {
	for _, s := range c.r.slots {
		s.mu.Lock()
		match := uid != "" && s.pod != nil && string(s.pod.UID) == uid
		s.mu.Unlock()
		if match {
			return s
		}
	}
	return nil
}

// owns reports whether uid is the UID of one of the cluster's pods (any worker it started).
func (c *gcluster) owns(uid string) bool {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	for _, w := range c.r.workers {
		if w.uid == uid {
			return true
		}
	}
	return false
}

// histories returns the cluster's worker histories, their pods named "<cluster>/<pod>".
func (c *gcluster) histories() []chaos.WorkerHistory {
	hs := c.r.histories()
	for i := range hs {
		hs[i].Pod = c.name + "/" + hs[i].Pod
	}
	return hs
}
