package global_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
	"github.com/lockwarden/lockwarden/pkg/leadership"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// A system-level adversarial review of Global locks: two clusters east and west, one Global
// lock "g" of one global name in each, two candidate pods per cluster (created and reported
// Running and Ready by internal/podsim, bound to a node as a kubelet's pods are), and one REAL
// pkg/leadership Elector per pod, each reading its own cluster's API server through an
// apiproxy (so a pod's reads can be cut). Each manager reaches its API server through an
// apiproxy and the shared etcd through an etcdtest proxy, so either link can be cut or
// delayed. One goroutine polls every Elector's Token() every 20 ms on one clock and checks:
// no two pods (of any cluster) valid at once; a new term's token above every earlier one.

const sysPoll = 20 * time.Millisecond

// sysPod is one candidate pod and its Elector.
type sysPod struct {
	name  string // "<cluster>/<pod>"
	pod   *corev1.Pod
	proxy *apiproxy.Proxy // between the Elector and its API server
	el    *leadership.Elector
}

// sysSide is one cluster: the side of the two-cluster helpers plus the proxies of its manager.
type sysSide struct {
	*clusterSide
	mgrAPI  *apiproxy.Proxy // between the manager and its API server
	mgrEtcd *etcdtest.Proxy // between the manager and the shared etcd
	// mgrTCP is a TCP proxy between the manager and its API server (used instead of mgrAPI
	// with useTCP): paused bytes are delivered when it unpauses, also those of requests
	// their sender gave up on, so a write can commit long after it was sent.
	mgrTCP *etcdtest.Proxy
	useTCP bool
	pods   []*sysPod
	// electionTTL and electionLossExpected configure the manager (controllertest.Config).
	electionTTL          time.Duration
	electionLossExpected bool
}

// interval is one span of Valid() of one pod under one token, as the poller saw it.
type interval struct {
	pod      string
	token    int64
	from, to time.Time // to zero: still open
}

// statusEvent is one status write of a lock as a watch saw it.
type statusEvent struct {
	at      time.Time
	cluster string
	rv      string
	st      lockv1.DistributedLockStatus
}

// sysRecorder polls the Electors and records the lock's status writes in both clusters.
type sysRecorder struct {
	t0    time.Time
	pods  []*sysPod
	mu    sync.Mutex
	open  map[string]*interval
	all   []*interval
	errs  []string
	evs   []statusEvent
	maxT  int64  // the highest token of any term seen so far
	maxBy string // the pod that held maxT
	polls int
	stop  chan struct{}
	done  sync.WaitGroup
}

func (r *sysRecorder) rel(at time.Time) string {
	if at.IsZero() {
		return "open"
	}
	return fmt.Sprintf("%+.3fs", at.Sub(r.t0).Seconds())
}

func (r *sysRecorder) run() {
	defer r.done.Done()
	tick := time.NewTicker(sysPoll)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
		}
		r.poll()
	}
}

func (r *sysRecorder) poll() {
	toks := make([]int64, len(r.pods))
	for i, p := range r.pods {
		toks[i] = p.el.Token()
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.polls++
	var valid []string
	for i, p := range r.pods {
		tok := toks[i]
		cur := r.open[p.name]
		if cur != nil && cur.token != tok {
			cur.to = now
			delete(r.open, p.name)
			cur = nil
		}
		if tok == 0 {
			continue
		}
		valid = append(valid, fmt.Sprintf("%s(token %d)", p.name, tok))
		if cur == nil {
			iv := &interval{pod: p.name, token: tok, from: now}
			r.open[p.name], r.all = iv, append(r.all, iv)
			switch {
			case tok < r.maxT, tok == r.maxT && p.name != r.maxBy:
				r.errs = append(r.errs, fmt.Sprintf("%s: %s starts a term with token %d, not above %d held before by %s", r.rel(now), p.name, tok, r.maxT, r.maxBy))
			default:
				r.maxT, r.maxBy = tok, p.name
			}
		}
	}
	if len(valid) > 1 {
		r.errs = append(r.errs, fmt.Sprintf("%s: %d pods valid at once: %s", r.rel(now), len(valid), strings.Join(valid, ", ")))
	}
}

// watchStatus records every status write of the lock in s until stop.
func (r *sysRecorder) watchStatus(s *sysSide) {
	defer r.done.Done()
	for {
		ctx, cancel := context.WithCancel(context.Background())
		w, err := s.c.Watch(ctx, &lockv1.DistributedLockList{}, client.InNamespace(s.ns),
			client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", "g")})
		if err != nil {
			cancel()
			select {
			case <-r.stop:
				return
			case <-time.After(200 * time.Millisecond):
				continue
			}
		}
		stopped := r.drain(s, w)
		w.Stop()
		cancel()
		if stopped {
			return
		}
	}
}

func (r *sysRecorder) drain(s *sysSide, w watch.Interface) bool {
	for {
		select {
		case <-r.stop:
			return true
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false
			}
			l, isLock := ev.Object.(*lockv1.DistributedLock)
			if !isLock {
				continue
			}
			r.mu.Lock()
			r.evs = append(r.evs, statusEvent{at: time.Now(), cluster: s.name, rv: l.ResourceVersion, st: *l.Status.DeepCopy()})
			r.mu.Unlock()
		}
	}
}

// finish stops the recorder and fails t with the full timeline on any violation.
func (r *sysRecorder) finish(t *testing.T) {
	t.Helper()
	close(r.stop)
	r.done.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, iv := range r.open {
		iv.to = now
	}
	if r.polls < 100 {
		t.Errorf("the recorder polled the Electors %d times: too few to check anything", r.polls)
	}
	if len(r.errs) > 0 {
		t.Errorf("%d violations, the first: %s\n%s", len(r.errs), strings.Join(r.errs[:min(len(r.errs), 5)], "\n"), r.timeline())
		return
	}
	t.Logf("timeline:\n%s", r.timeline())
}

// timeline lists the leading intervals and the status writes, relative to the scenario's
// start (call with mu held).
func (r *sysRecorder) timeline() string {
	var b strings.Builder
	b.WriteString("  leading intervals (Valid() true, polled every 20 ms):\n")
	for _, iv := range r.all {
		fmt.Fprintf(&b, "    %-12s token %-6d from %s to %s\n", iv.pod, iv.token, r.rel(iv.from), r.rel(iv.to))
	}
	b.WriteString("  status writes (watch):\n")
	evs := append([]statusEvent(nil), r.evs...)
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at.Before(evs[j].at) })
	var last [2]string
	for _, e := range evs {
		d := describeGlobal(&e.st)
		i := 0
		if e.cluster == "west" {
			i = 1
		}
		if d == last[i] {
			continue
		}
		last[i] = d
		fmt.Fprintf(&b, "    %s %-4s rv=%s %s\n", r.rel(e.at), e.cluster, e.rv, d)
	}
	return b.String()
}

// firstValid returns the start of the first interval after t of a pod accepted by ok.
func (r *sysRecorder) firstValid(after time.Time, ok func(iv *interval) bool) (time.Time, *interval) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, iv := range r.all {
		if iv.from.After(after) && ok(iv) {
			return iv.from, iv
		}
	}
	return time.Time{}, nil
}

// lastValid returns the end of the newest interval of pod (zero while open, ok=false when none).
func (r *sysRecorder) lastValid(pod string) (to time.Time, open, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.all) - 1; i >= 0; i-- {
		if iv := r.all[i]; iv.pod == pod {
			return iv.to, iv.to.IsZero(), true
		}
	}
	return time.Time{}, false, false
}

// sysScenario is one running two-cluster system: managers, pods and Electors.
type sysScenario struct {
	t            *testing.T
	east, west   *sysSide
	rec          *sysRecorder
	holder, othr *sysSide
	holderPod    *sysPod
	token        int64
}

// newSysSide makes a cluster side whose manager reaches its API server and the shared etcd
// through proxies.
func newSysSide(t *testing.T, name string, cfg *testenv.Env, c client.WithWatch, ns, globalPrefix string) *sysSide {
	t.Helper()
	ep := etcdtest.NewProxy(t, etcd.Endpoint)
	b := controllertest.NewBackend(t, ep.Endpoint())
	g, err := lease.NewGlobal(b.Client, globalPrefix)
	if err != nil {
		t.Fatal(err)
	}
	ap, err := apiproxy.Start(cfg.Config, apiproxy.Options{})
	if err != nil {
		t.Fatalf("%s: manager's API proxy: %v", name, err)
	}
	t.Cleanup(func() { _ = ap.Close() })
	return &sysSide{
		clusterSide: &clusterSide{t: t, name: name, cfg: cfg, c: c, ns: ns, backend: b, global: g},
		mgrAPI:      ap, mgrEtcd: ep, mgrTCP: etcdtest.NewProxy(t, cfg.Config.Host),
	}
}

// startManager runs the side's manager through its proxies.
func (s *sysSide) startManager() {
	s.t.Helper()
	rc := s.mgrAPI.Config()
	if s.useTCP {
		rc = rest.CopyConfig(s.cfg.Config)
		rc.Host = "https://" + s.mgrTCP.Host()
	}
	s.stop = controllertest.Start(s.t, rc, controllertest.Config{
		Namespace: s.ns, Engine: s.backend.Engine, Identity: s.name + "-manager",
		ClusterName: s.name, Global: s.global,
		ElectionTTL: s.electionTTL, ElectionLossExpected: s.electionLossExpected,
	})
	s.t.Cleanup(s.stop)
}

// addPod creates a Running and Ready candidate (app=g) and its Elector behind a proxy of its own.
func (s *sysSide) addPod(name string) *sysPod {
	s.t.Helper()
	p := s.pod(name, "g")
	px, err := apiproxy.Start(s.cfg.Config, apiproxy.Options{})
	if err != nil {
		s.t.Fatalf("%s: pod proxy: %v", s.name, err)
	}
	s.t.Cleanup(func() { _ = px.Close() })
	el, err := leadership.New(leadership.Config{Config: px.Config(), Namespace: s.ns, Lock: "g", Identity: p.UID, Name: p.Name})
	if err != nil {
		s.t.Fatalf("%s: elector: %v", s.name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	s.t.Cleanup(func() {
		cancel()
		px.SetMode(apiproxy.Pass)
		select {
		case err := <-done:
			if err != nil {
				s.t.Errorf("%s/%s: Run = %v", s.name, name, err)
			}
		case <-time.After(15 * time.Second):
			s.t.Errorf("%s/%s: Run did not return", s.name, name)
		}
	})
	sp := &sysPod{name: s.name + "/" + name, pod: p, proxy: px, el: el}
	s.pods = append(s.pods, sp)
	return sp
}

// startSys builds both clusters (pods p and q, q Ready 1.1 s after p, the locks, the Electors,
// the recorder), starts both managers and waits until one pod leads.
func startSys(t *testing.T, second plane, globalName string, opts ...func(*sysSide)) *sysScenario {
	t.Helper()
	gp := fmt.Sprintf("/lockwarden-test-global/sys-%d", globalPrefixes.Add(1))
	ns2 := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "west-"}}
	if err := second.c.Create(bg(), ns2); err != nil {
		t.Fatalf("create namespace in west: %v", err)
	}
	east := newSysSide(t, "east", env, k8s, fixtureNamespace(t, "east-").Name, gp)
	west := newSysSide(t, "west", second.env, second.c, ns2.Name, gp)
	sc := &sysScenario{t: t, east: east, west: west}
	for _, o := range opts {
		o(east)
		o(west)
	}
	for _, s := range []*sysSide{east, west} {
		s.addPod("p")
	}
	time.Sleep(1100 * time.Millisecond)
	for _, s := range []*sysSide{east, west} {
		s.addPod("q")
		s.lock("g", "g", globalName)
	}
	sc.rec = &sysRecorder{t0: time.Now(), pods: append(append([]*sysPod(nil), east.pods...), west.pods...), open: map[string]*interval{}, stop: make(chan struct{})}
	sc.rec.done.Add(3)
	go sc.rec.run()
	go sc.rec.watchStatus(east)
	go sc.rec.watchStatus(west)
	t.Cleanup(func() {
		select {
		case <-sc.rec.stop:
		default:
			sc.rec.finish(t)
		}
	})
	east.startManager()
	west.startManager()
	eventually(t, 25*time.Second, func() bool {
		for _, s := range []*sysSide{east, west} {
			for _, p := range s.pods {
				if tok := p.el.Token(); tok != 0 {
					sc.holder, sc.holderPod, sc.token = s, p, tok
					return true
				}
			}
		}
		return false
	}, func() string { return "no pod leads" })
	sc.othr = west
	if sc.holder == west {
		sc.othr = east
	}
	// The other cluster publishes the term before any fault.
	waitSide(t, sc.othr.clusterSide, "g", 10*time.Second, "held elsewhere", heldElsewhere(sc.holder.name, sc.token))
	t.Logf("%s leads with token %d at %s", sc.holderPod.name, sc.token, sc.rec.rel(time.Now()))
	return sc
}

// failover waits until a pod accepted by ok leads after the fault at f, logs the failover time
// beside G + D + 1 s and returns it.
func (sc *sysScenario) failover(what string, f time.Time, timeout time.Duration, ok func(iv *interval) bool) time.Duration {
	sc.t.Helper()
	var at time.Time
	var iv *interval
	eventually(sc.t, timeout, func() bool {
		at, iv = sc.rec.firstValid(f, ok)
		return iv != nil
	}, func() string {
		sc.rec.mu.Lock()
		defer sc.rec.mu.Unlock()
		return fmt.Sprintf("%s: no new holder leads; fault at %s\n%s", what, sc.rec.rel(f), sc.rec.timeline())
	})
	d := at.Sub(f)
	bound := globalG + globalD + time.Second
	sc.t.Logf("FAILOVER %s: %s leads token %d %.3fs after the fault (G + D + 1 s = %v)", what, iv.pod, iv.token, d.Seconds(), bound)
	return d
}

// holderStopsBy checks that the pod's Valid() was false by limit after the fault at f (as the
// poller saw it: its newest interval closed).
func (sc *sysScenario) holderStopsBy(p *sysPod, f time.Time, limit time.Duration) {
	sc.t.Helper()
	eventually(sc.t, limit+time.Second, func() bool {
		_, open, _ := sc.rec.lastValid(p.name)
		return p.el.Token() == 0 && !open
	}, func() string {
		return fmt.Sprintf("%s still valid %v after the fault", p.name, limit)
	})
	if to, _, ok := sc.rec.lastValid(p.name); ok {
		sc.t.Logf("%s stopped leading %.3fs after the fault", p.name, to.Sub(f).Seconds())
		if to.Sub(f) > limit {
			sc.t.Errorf("%s stopped %v after the fault; want at most %v", p.name, to.Sub(f), limit)
		}
	}
}

// probeEtcd sends a linearizable Get through endpoint every 500 ms (a client of its own, on
// its own connection through the proxy) and returns a func that stops it and describes the
// round trips it measured.
func probeEtcd(t *testing.T, endpoint string) func() string {
	cli := controllertest.NewBackend(t, endpoint).Client
	var mu sync.Mutex
	var rtts []time.Duration
	failed := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			start := time.Now()
			_, err := cli.Get(ctx, "/lockwarden-test-probe")
			cancel()
			mu.Lock()
			if err != nil {
				failed++
			} else {
				rtts = append(rtts, time.Since(start))
			}
			mu.Unlock()
		}
	}()
	var once sync.Once
	var out string
	res := func() string {
		once.Do(func() {
			close(stop)
			<-done
			sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
			if len(rtts) == 0 {
				out = fmt.Sprintf("no answer (%d failed)", failed)
				return
			}
			out = fmt.Sprintf("min %v, median %v, max %v over %d (%d failed after 5 s)", rtts[0].Round(time.Millisecond),
				rtts[len(rtts)/2].Round(time.Millisecond), rtts[len(rtts)-1].Round(time.Millisecond), len(rtts), failed)
		})
		return out
	}
	t.Cleanup(func() { res() })
	return res
}

func notPod(p *sysPod) func(iv *interval) bool {
	return func(iv *interval) bool { return iv.pod != p.name }
}

func inCluster(s *sysSide) func(iv *interval) bool {
	return func(iv *interval) bool { return strings.HasPrefix(iv.pod, s.name+"/") }
}

// TestReviewSysGlobal runs the attack timelines against the real Electors.
func TestReviewSysGlobal(t *testing.T) {
	second := secondControlPlane(t)

	t.Run("holder manager stopped", func(t *testing.T) {
		sc := startSys(t, second, "sys-stop.example.com")
		time.Sleep(globalL) // a few rounds
		f := time.Now()
		sc.holder.stop()
		// R5: the pod is bound by S + D - m of a read showing round r-2, r its last round.
		sc.holderStopsBy(sc.holderPod, f, globalD)
		sc.failover("holder manager stopped", f, globalG+globalD+8*time.Second, inCluster(sc.othr))
		time.Sleep(2 * time.Second)
		sc.rec.finish(t)
	})

	t.Run("holder pod's reads cut, then the pod deleted (PodGC)", func(t *testing.T) {
		sc := startSys(t, second, "sys-cut.example.com")
		time.Sleep(globalL)
		cut := time.Now()
		sc.holderPod.proxy.SetMode(apiproxy.Hold)
		time.Sleep(time.Second)
		del := time.Now()
		// The node is lost: PodGC writes Failed (containers still running) and force-deletes;
		// the process behind the cut keeps running.
		if err := sc.holder.sim().PodGC(bg(), sc.holderPod.pod); err != nil {
			t.Fatal(err)
		}
		// In-cluster bound: the last successful read's send + L - m; reads every L/3.
		sc.holderStopsBy(sc.holderPod, cut, globalL)
		sc.failover("holder pod cut and deleted (from the deletion)", del, globalD+10*time.Second, notPod(sc.holderPod))
		time.Sleep(2 * time.Second)
		sc.rec.finish(t)
	})

	t.Run("holder manager cut from its API server, not from etcd", func(t *testing.T) {
		sc := startSys(t, second, "sys-mgrcut.example.com")
		time.Sleep(globalL)
		f := time.Now()
		sc.holder.mgrAPI.SetMode(apiproxy.Refuse)
		for _, p := range sc.holder.pods {
			sc.holderStopsBy(p, f, globalD)
		}
		sc.failover("holder manager cut from its API server", f, globalG+globalD+10*time.Second, inCluster(sc.othr))
		time.Sleep(2 * time.Second)
		for _, p := range sc.holder.pods {
			if p.el.Token() != 0 {
				t.Errorf("%s of the cut cluster leads token %d after the takeover", p.name, p.el.Token())
			}
		}
		sc.rec.finish(t)
		sc.holder.mgrAPI.SetMode(apiproxy.Pass)
	})

	t.Run("holder manager's API link paused at TCP level past the takeover, then delivered (late writes)", func(t *testing.T) {
		sc := startSys(t, second, "sys-mgrtcp.example.com", func(s *sysSide) { s.useTCP = true })
		time.Sleep(globalL)
		f := time.Now()
		sc.holder.mgrTCP.Pause()
		sc.failover("holder manager's API link paused (TCP)", f, globalG+globalD+10*time.Second, inCluster(sc.othr))
		released := time.Now()
		sc.holder.mgrTCP.Unpause()
		t.Logf("delivered the paused bytes at %s", sc.rec.rel(released))
		time.Sleep(6 * time.Second)
		for _, p := range sc.holder.pods {
			if p.el.Token() != 0 {
				t.Errorf("%s of the paused cluster leads token %d after the late delivery", p.name, p.el.Token())
			}
		}
		sc.rec.finish(t)
	})

	// The holder manager's etcd link slowed, each direction by d (etcd's proxy delays every
	// chunk it forwards, so a burst waits longer): confirmations, keepalives and the election's
	// renewals answer late, rounds' status writes land late.
	delayed := func(t *testing.T, globalName string, d, electionTTL time.Duration, lossExpected bool) {
		sc := startSys(t, second, globalName, func(s *sysSide) {
			s.electionTTL, s.electionLossExpected = electionTTL, lossExpected
		})
		time.Sleep(globalL)
		f := time.Now()
		sc.holder.mgrEtcd.DelayTx(d)
		sc.holder.mgrEtcd.DelayRx(d)
		probe := probeEtcd(t, sc.holder.mgrEtcd.Endpoint())
		time.Sleep(16 * time.Second)
		sc.holder.mgrEtcd.UndelayTx()
		sc.holder.mgrEtcd.UndelayRx()
		t.Logf("etcd delayed %v each way: a probe's linearizable Get through the same proxy took %s", d, probe())
		if lossExpected {
			sc.failover(fmt.Sprintf("etcd delayed %v each way", d), f, globalG+globalD+10*time.Second, notPod(sc.holderPod))
		} else if at, iv := sc.rec.firstValid(f, notPod(sc.holderPod)); iv != nil {
			t.Logf("FAILOVER etcd delayed %v each way: %s leads token %d %.3fs after the delay began (G + D + 1 s = %v)", d, iv.pod, iv.token, at.Sub(f).Seconds(), globalG+globalD+time.Second)
		} else {
			t.Logf("etcd delayed %v each way: no failover in 16 s; %s valid now: %v", d, sc.holderPod.name, sc.holderPod.el.Valid())
		}
		time.Sleep(3 * time.Second)
		sc.rec.finish(t)
	}
	t.Run("holder manager's etcd link delayed 200ms each way, election TTL 10s", func(t *testing.T) {
		delayed(t, "sys-slow.example.com", 200*time.Millisecond, 10*time.Second, false)
	})
	t.Run("holder manager's etcd link delayed 500ms each way, election TTL 3s: election lost", func(t *testing.T) {
		delayed(t, "sys-slow3.example.com", 500*time.Millisecond, 3*time.Second, true)
	})

	t.Run("both managers restarted at once", func(t *testing.T) {
		sc := startSys(t, second, "sys-restart.example.com")
		time.Sleep(globalL)
		f := time.Now()
		sc.east.stop()
		sc.west.stop()
		sc.east.startManager()
		sc.west.startManager()
		restarted := time.Now()
		t.Logf("both managers stopped and started in %.3fs", restarted.Sub(f).Seconds())
		eventually(t, globalG+globalD+10*time.Second, func() bool {
			for _, p := range sc.rec.pods {
				if p.el.Token() != 0 {
					return true
				}
			}
			return false
		}, func() string { return "nobody leads after the restart" })
		time.Sleep(8 * time.Second) // the adopted term must go on, or a takeover be safe
		if _, iv := sc.rec.firstValid(f, func(iv *interval) bool { return iv.token != sc.token }); iv != nil {
			sc.failover("both managers restarted (a new term)", f, time.Second, func(iv *interval) bool { return iv.token != sc.token })
		} else {
			to, open, _ := sc.rec.lastValid(sc.holderPod.name)
			t.Logf("both managers restarted: %s kept token %d (interval open: %v, to %s)", sc.holderPod.name, sc.token, open, sc.rec.rel(to))
		}
		sc.rec.finish(t)
	})
}
