package global_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
	"github.com/lockwarden/lockwarden/internal/podsim"
	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Two clusters, east and west, each with its own control plane (the suite's and a second one
// started here) and its own manager, sharing the suite's etcd: each manager's engine on a
// prefix of its own, one global prefix per test. Every test watches both statuses as a pod
// would (globalWatch): at no poll are both clusters' holders valid by rule R5, and while both
// managers run no two statuses show Held with a globalHolderUID at once; tokens only grow.

const (
	globalL = 6 * time.Second  // leaseDurationSeconds
	globalD = 12 * time.Second // the default delay of a Global lock, 2L
	globalG = globalL          // the grant lease's TTL
)

// clusterSide is one cluster of a two-cluster test.
type clusterSide struct {
	t       *testing.T
	name    string
	cfg     *testenv.Env
	c       client.WithWatch
	ns      string
	backend *controllertest.Backend
	global  *lease.Global
	stop    func()
	kubelet *podsim.Kubelet // sim()
}

// plane is a control plane: its Env and an uncached client.
type plane struct {
	env *testenv.Env
	c   client.WithWatch
}

// secondControlPlane starts the west cluster's control plane, stopped at t's end.
func secondControlPlane(t *testing.T) plane {
	t.Helper()
	env2, err := testenv.Start()
	if err != nil {
		t.Fatalf("second control plane: %v", err)
	}
	t.Cleanup(func() { _ = env2.Stop() })
	c, err := env2.Client()
	if err != nil {
		t.Fatalf("second control plane's client: %v", err)
	}
	return plane{env: env2, c: testenv.RideOutConverterDelay(c, 30*time.Second)}
}

var globalPrefixes atomic.Int64

// twoClusters makes east (the suite's control plane) and west (the second), with a
// namespace each, engines on the suite's etcd and one global prefix, managers not started.
func twoClusters(t *testing.T, second plane) (east, west *clusterSide) {
	t.Helper()
	env2, c2 := second.env, second.c
	gp := fmt.Sprintf("/lockwarden-test-global/%d", globalPrefixes.Add(1))
	side := func(name string, e *testenv.Env, c client.WithWatch, ns string) *clusterSide {
		b := controllertest.NewBackend(t, etcd.Endpoint)
		g, err := lease.NewGlobal(b.Client, gp)
		if err != nil {
			t.Fatal(err)
		}
		return &clusterSide{t: t, name: name, cfg: e, c: c, ns: ns, backend: b, global: g}
	}
	east = side("east", env, k8s, fixtureNamespace(t, "east-").Name)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "west-"}}
	if err := c2.Create(bg(), ns); err != nil {
		t.Fatalf("create namespace in west: %v", err)
	}
	west = side("west", env2, c2, ns.Name)
	return east, west
}

// start runs the side's manager (cluster name, its engine, the shared global prefix).
func (s *clusterSide) start() {
	s.t.Helper()
	s.stop = controllertest.Start(s.t, s.cfg.Config, controllertest.Config{
		Namespace: s.ns, Engine: s.backend.Engine, Identity: s.name + "-manager",
		ClusterName: s.name, Global: s.global,
	})
	s.t.Cleanup(s.stop)
}

// sim is the side's stand-in kubelet (internal/podsim), made on first use.
func (s *clusterSide) sim() *podsim.Kubelet {
	s.t.Helper()
	if s.kubelet == nil {
		cs, err := kubernetes.NewForConfig(s.cfg.Config)
		if err != nil {
			s.t.Fatalf("%s: clientset: %v", s.name, err)
		}
		s.kubelet = &podsim.Kubelet{Client: cs, Namespace: s.ns}
	}
	return s.kubelet
}

// pod creates a pod labelled app=<app>, bound to a node and reported Running and Ready as a
// kubelet reports it (podsim.CreateReadyPod).
func (s *clusterSide) pod(name, app string) *corev1.Pod {
	s.t.Helper()
	p, err := s.sim().CreateReadyPod(bg(), name, map[string]string{"app": app})
	if err != nil {
		s.t.Fatalf("%s: %v", s.name, err)
	}
	return p
}

// lock creates the Global lock name for globalName over app=<app> (L = 6 s, D unset: 2L).
func (s *clusterSide) lock(name, app, globalName string) *lockv1.DistributedLock {
	s.t.Helper()
	return controllertest.CreateLock(s.t, s.c, s.ns, name, app, globalLock(globalName))
}

// get reads the lock uncached.
func (s *clusterSide) get(name string) (*lockv1.DistributedLock, error) {
	var l lockv1.DistributedLock
	err := s.c.Get(bg(), client.ObjectKey{Namespace: s.ns, Name: name}, &l)
	return &l, err
}

// heldHere: the status shows this cluster's pod holding the global term.
func heldHere(st *lockv1.DistributedLockStatus) bool {
	return st.Phase == lockv1.PhaseHeld && st.GlobalHolderUID != ""
}

// globalWatch polls both clusters' lock (as a holder pod would, with consistent reads) and
// checks safety at every poll until stopped.
type globalWatch struct {
	t       *testing.T
	sides   [2]*clusterSide
	name    string
	strict  atomic.Bool // both managers run: no two statuses show a holder here at once
	mu      sync.Mutex
	reads   [2][]podRead
	errs    []string
	maxTok  int64    // the highest token held anywhere so far
	lastTok [2]int64 // the token of each cluster's newest term held here
	lastMax [2]int64 // each cluster's highest maxFencingToken read
	stopc   chan struct{}
	done    chan struct{}
	once    sync.Once
}

// podRead is one consistent read of a lock: sent before, the status it showed.
type podRead struct {
	sent time.Time
	uid  types.UID
	st   lockv1.DistributedLockStatus
}

func watchGlobal(t *testing.T, east, west *clusterSide, name string) *globalWatch {
	w := &globalWatch{t: t, sides: [2]*clusterSide{east, west}, name: name, stopc: make(chan struct{}), done: make(chan struct{})}
	w.strict.Store(true)
	go w.run()
	t.Cleanup(w.finish)
	return w
}

func (w *globalWatch) run() {
	defer close(w.done)
	for {
		select {
		case <-w.stopc:
			return
		case <-time.After(50 * time.Millisecond):
		}
		for i, s := range w.sides {
			sent := time.Now()
			l, err := s.get(w.name)
			if err != nil {
				continue
			}
			w.record(i, podRead{sent: sent, uid: l.UID, st: *l.Status.DeepCopy()})
		}
	}
}

// record adds a read and checks the invariants against both clusters' reads so far.
func (w *globalWatch) record(i int, r podRead) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reads[i] = append(w.reads[i], r)
	now := time.Now()
	valid := [2]bool{validByR5(w.reads[0], now), validByR5(w.reads[1], now)}
	if valid[0] && valid[1] {
		w.errs = append(w.errs, fmt.Sprintf("%v: the holders of both clusters are valid by R5: east %s; west %s", now.Format("15:04:05.000"), describeGlobal(&w.latest(0).st), describeGlobal(&w.latest(1).st)))
	}
	if w.strict.Load() && len(w.reads[0]) > 0 && len(w.reads[1]) > 0 && heldHere(&w.latest(0).st) && heldHere(&w.latest(1).st) {
		w.errs = append(w.errs, fmt.Sprintf("%v: both statuses show a holder here: east %s; west %s", now.Format("15:04:05.000"), describeGlobal(&w.latest(0).st), describeGlobal(&w.latest(1).st)))
	}
	if st := &r.st; heldHere(st) && st.FencingToken != w.lastTok[i] {
		// A new term here (a stopped manager's status keeps showing its last one).
		if st.FencingToken <= w.maxTok {
			w.errs = append(w.errs, fmt.Sprintf("%s holds a new term with token %d, not above %d, held before", w.sides[i].name, st.FencingToken, w.maxTok))
		}
		w.lastTok[i], w.maxTok = st.FencingToken, max(w.maxTok, st.FencingToken)
	}
	if st := &r.st; st.MaxFencingToken < w.lastMax[i] {
		w.errs = append(w.errs, fmt.Sprintf("%s: maxFencingToken went from %d to %d", w.sides[i].name, w.lastMax[i], st.MaxFencingToken))
	}
	w.lastMax[i] = max(w.lastMax[i], r.st.MaxFencingToken)
}

func (w *globalWatch) latest(i int) *podRead { return &w.reads[i][len(w.reads[i])-1] }

// validByR5 reports whether a pod that made reads (oldest first) would lead at now by rule
// R5: its newest read shows Held here with fencingToken == globalToken, and some read of the
// same object, showing a round at most r-2 (r: the newest read's round), was sent less than
// D - m before now, D the published delay and m = max(2 s, D/50).
func validByR5(reads []podRead, now time.Time) bool {
	if len(reads) == 0 {
		return false
	}
	last := reads[len(reads)-1]
	st := &last.st
	if !heldHere(st) || st.FencingToken != st.GlobalToken || st.GlobalToken == 0 {
		return false
	}
	d := time.Duration(st.GlobalLockDelaySeconds) * time.Second
	m := max(2*time.Second, d/50)
	for j := len(reads) - 1; j >= 0; j-- {
		if r := reads[j]; r.uid == last.uid && r.st.GlobalRound <= st.GlobalRound-2 {
			return now.Before(r.sent.Add(d - m))
		}
	}
	return false
}

func describeGlobal(st *lockv1.DistributedLockStatus) string {
	return fmt.Sprintf("phase=%s holder=%s globalHolderUID=%s cluster=%s token=%d round=%d/%d delay=%d", st.Phase, st.Holder, st.GlobalHolderUID, st.GlobalCluster, st.FencingToken, st.GlobalRound, st.GlobalToken, st.GlobalLockDelaySeconds)
}

// finish stops the polls and reports every violation.
func (w *globalWatch) finish() {
	w.once.Do(func() {
		close(w.stopc)
		<-w.done
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.errs) > 0 {
			w.t.Errorf("%d safety violations, the first: %s", len(w.errs), strings.Join(w.errs[:min(len(w.errs), 5)], "\n"))
		}
		if len(w.reads[0]) < 20 || len(w.reads[1]) < 20 {
			w.t.Errorf("the watch read east %d and west %d times: too few to check anything", len(w.reads[0]), len(w.reads[1]))
		}
	})
}

// waitSide polls s's lock until cond holds.
func waitSide(t *testing.T, s *clusterSide, name string, timeout time.Duration, what string, cond func(*lockv1.DistributedLockStatus) bool) *lockv1.DistributedLock {
	t.Helper()
	var last *lockv1.DistributedLock
	eventually(t, timeout, func() bool {
		l, err := s.get(name)
		if err != nil {
			return false
		}
		last = l
		return cond(&l.Status)
	}, func() string {
		if last == nil {
			return s.name + ": " + what + ": no read"
		}
		return fmt.Sprintf("%s: %s; status: %s", s.name, what, describeGlobal(&last.Status))
	})
	return last
}

// heldBy: the term is held here by pod p.
func heldHereBy(p *corev1.Pod) func(*lockv1.DistributedLockStatus) bool {
	return func(st *lockv1.DistributedLockStatus) bool {
		return heldHere(st) && st.GlobalHolderUID == p.UID && st.GlobalToken == st.FencingToken && st.GlobalRound >= 2
	}
}

// heldElsewhere: the term is published as held by cluster with token.
func heldElsewhere(cluster string, token int64) func(*lockv1.DistributedLockStatus) bool {
	return func(st *lockv1.DistributedLockStatus) bool {
		return st.Phase == lockv1.PhaseHeld && st.GlobalHolderUID == "" && st.HolderUID == "" && st.Holder == "" &&
			st.GlobalCluster == cluster && st.FencingToken == token
	}
}

// firstHolder waits until one cluster holds the lock and the other publishes it held
// elsewhere with the same token; it returns the holder side first.
func firstHolder(t *testing.T, east, west *clusterSide, name string, pods map[string]*corev1.Pod) (holder, other *clusterSide, token int64) {
	t.Helper()
	eventually(t, 20*time.Second, func() bool {
		for _, s := range []*clusterSide{east, west} {
			if l, err := s.get(name); err == nil && heldHereBy(pods[s.name])(&l.Status) {
				holder, token = s, l.Status.FencingToken
				return true
			}
		}
		return false
	}, func() string { return "no cluster holds " + name })
	other = west
	if holder == west {
		other = east
	}
	waitSide(t, other, name, 10*time.Second, "held elsewhere with the holder's token", heldElsewhere(holder.name, token))
	return holder, other, token
}

// grantEvent is a change of K seen by the test's etcd watch: a put (a grant, token its
// CreateRevision) or a delete, and when the test received it.
type grantEvent struct {
	at    time.Time
	put   bool
	token int64
}

// grantLog records every change of globalName's K until the test ends.
type grantLog struct {
	mu     sync.Mutex
	events []grantEvent
}

func watchGrant(t *testing.T, s *clusterSide, globalName string) *grantLog {
	ctx, cancel := context.WithCancel(context.Background())
	g := &grantLog{}
	wc := s.backend.Client.Watch(ctx, s.global.GrantPath(globalName))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for resp := range wc {
			at := time.Now()
			g.mu.Lock()
			for _, ev := range resp.Events {
				g.events = append(g.events, grantEvent{at: at, put: ev.Type == clientv3.EventTypePut, token: ev.Kv.CreateRevision})
			}
			g.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return g
}

// gapBefore returns when K was seen deleted last before the put of token, and that put.
func (g *grantLog) gapBefore(t *testing.T, token int64) (deleted, granted time.Time) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.events {
		switch {
		case !e.put:
			deleted = e.at
		case e.token == token:
			if deleted.IsZero() {
				t.Fatalf("token %d was granted with no deletion of K seen before it: %+v", token, g.events)
			}
			return deleted, e.at
		}
	}
	t.Fatalf("no grant of token %d seen: %+v", token, g.events)
	return
}

// watchLag is how much later than a manager the test's own etcd watch may receive a
// deletion of K: the check that a takeover waited D after the deletion allows it.
const watchLag = 300 * time.Millisecond

// scenario is a running two-cluster test: one pod and one lock "g" of globalName in each
// cluster, both managers running, the first grant made.
type scenario struct {
	east, west    *clusterSide
	pods          map[string]*corev1.Pod
	grants        *grantLog
	w             *globalWatch
	holder, other *clusterSide
	t1            int64 // the first grant's token
}

func startScenario(t *testing.T, second plane, globalName string, more ...func(east, west *clusterSide)) *scenario {
	t.Helper()
	east, west := twoClusters(t, second)
	sc := &scenario{east: east, west: west, pods: map[string]*corev1.Pod{"east": east.pod("p-east", "g"), "west": west.pod("p-west", "g")}}
	for _, f := range more {
		f(east, west)
	}
	east.lock("g", "g", globalName)
	west.lock("g", "g", globalName)
	sc.grants = watchGrant(t, east, globalName)
	sc.w = watchGlobal(t, east, west, "g")
	east.start()
	west.start()
	sc.holder, sc.other, sc.t1 = firstHolder(t, east, west, "g", sc.pods)
	return sc
}

// takenOver waits until the other cluster holds the lock with a token above the first
// grant's, granted at least D after K was seen gone; it returns the token and when K was
// seen deleted.
func (sc *scenario) takenOver(t *testing.T, timeout time.Duration) (token int64, deleted time.Time) {
	t.Helper()
	l := waitSide(t, sc.other, "g", timeout, "takes over", heldHereBy(sc.pods[sc.other.name]))
	token = l.Status.FencingToken
	if token <= sc.t1 {
		t.Fatalf("the takeover's token %d is not above %d", token, sc.t1)
	}
	deleted, granted := sc.grants.gapBefore(t, token)
	if gap := granted.Sub(deleted); gap < globalD-watchLag {
		t.Errorf("%s granted %v after K was seen gone; want at least D = %v", sc.other.name, gap, globalD)
	}
	return token, deleted
}

// TestGlobalTwoClusters runs the two-cluster scenarios on one second control plane.
func TestGlobalTwoClusters(t *testing.T) {
	second := secondControlPlane(t)
	t.Run("first grant, then the holder's lock deleted", func(t *testing.T) {
		sc := startScenario(t, second, "first.example.com")
		holder, other, token := sc.holder, sc.other, sc.t1
		// Rounds go on in the holder cluster; the other keeps publishing the same term.
		l := waitSide(t, holder, "g", 3*globalL, "rounds go on", func(st *lockv1.DistributedLockStatus) bool { return st.GlobalRound >= 5 })
		if l.Status.FencingToken != token || l.Status.HolderUID != "" {
			t.Errorf("%s: the term changed or holderUID is set: %s", holder.name, describeGlobal(&l.Status))
		}
		if o, err := other.get("g"); err != nil || !heldElsewhere(holder.name, token)(&o.Status) || o.Status.GlobalRound != 0 {
			t.Errorf("%s: want held elsewhere with token %d and no round: %v %s", other.name, token, err, describeGlobal(&o.Status))
		}
		// Deleting the holder's lock ends the term: Releasing, D, the guarded delete of K,
		// and only then is the lock gone (its finalizer, which the manager set, dropped).
		if err := holder.c.Delete(bg(), l); err != nil {
			t.Fatalf("delete the holder's lock: %v", err)
		}
		waitSide(t, holder, "g", 5*time.Second, "Releasing", func(st *lockv1.DistributedLockStatus) bool {
			c := meta.FindStatusCondition(st.Conditions, lockv1.ConditionHeld)
			return st.Phase == lockv1.PhaseReleasing && c != nil && c.Reason == lockv1.ReasonDeleted
		})
		releasing := time.Now()
		eventually(t, globalD+5*time.Second, func() bool {
			_, err := holder.get("g")
			return apierrors.IsNotFound(err)
		}, func() string { return holder.name + ": the deleted lock is still there" })
		if gone := time.Since(releasing); gone < globalD-watchLag {
			t.Errorf("%s: the deleted lock was gone %v after Releasing; want at least D = %v", holder.name, gone, globalD)
		}
		sc.w.finish()
	})

	t.Run("clusterPreference holds a less preferred cluster back", func(t *testing.T) {
		east, west := twoClusters(t, second)
		pe, pw := east.pod("p-east", "g"), west.pod("p-west", "g")
		prefer := func(s *lockv1.DistributedLockSpec) {
			globalLock("pref.example.com")(s)
			s.LeaseDurationSeconds = 12 // P0 = 4 s: east holds back 4 s from seeing the grant free
			s.ClusterPreference = []string{"west", "east"}
		}
		controllertest.CreateLock(t, east.c, east.ns, "g", "g", prefer)
		controllertest.CreateLock(t, west.c, west.ns, "g", "g", prefer)
		w := watchGlobal(t, east, west, "g")
		east.start() // first: without the preference it would take the grant
		time.Sleep(time.Second)
		west.start()
		l := waitSide(t, west, "g", 15*time.Second, "the preferred cluster holds", heldHereBy(pw))
		waitSide(t, east, "g", 10*time.Second, "held elsewhere", heldElsewhere("west", l.Status.FencingToken))
		if el, err := east.get("g"); err != nil || el.Status.GlobalHolderUID == pe.UID {
			t.Errorf("east: %v %s", err, describeGlobal(&el.Status))
		}
		w.finish()
	})

	t.Run("a taken cluster name is refused", func(t *testing.T) {
		east, west := twoClusters(t, second)
		if _, err := controllers.RegisterCluster(bg(), east.c, east.global, "east", east.backend.Engine.Prefix()); err != nil {
			t.Fatalf("register east: %v", err)
		}
		// west's control plane under east's name (a copied values file, F3): refused,
		// naming both UIDs; west under its own name on east's engine prefix: refused too.
		_, err := controllers.RegisterCluster(bg(), west.c, west.global, "east", west.backend.Engine.Prefix())
		if !errors.Is(err, lease.ErrClusterNameTaken) {
			t.Fatalf("register west as east = %v; want ErrClusterNameTaken", err)
		}
		_, err = controllers.RegisterCluster(bg(), west.c, west.global, "west", east.backend.Engine.Prefix())
		if !errors.Is(err, lease.ErrClusterNameTaken) {
			t.Fatalf("register west on east's engine prefix = %v; want ErrClusterNameTaken", err)
		}
		if _, err := controllers.RegisterCluster(bg(), west.c, west.global, "west", west.backend.Engine.Prefix()); err != nil {
			t.Fatalf("register west: %v", err)
		}
	})

	t.Run("two locks of one global name in a cluster", func(t *testing.T) {
		east, _ := twoClusters(t, second)
		p := east.pod("p1", "g")
		east.lock("older", "g", "dup.example.com")
		time.Sleep(1100 * time.Millisecond) // creationTimestamp has whole seconds
		east.lock("younger", "g", "dup.example.com")
		east.start()
		waitSide(t, east, "older", 15*time.Second, "held", heldHereBy(p))
		dup := func(st *lockv1.DistributedLockStatus) bool {
			c := meta.FindStatusCondition(st.Conditions, lockv1.ConditionHeld)
			return c != nil && c.Reason == controllers.ReasonDuplicateGlobalName && st.GlobalHolderUID == "" && st.GlobalRound == 0
		}
		waitSide(t, east, "younger", 10*time.Second, "DuplicateGlobalName", dup)
		consistently(t, globalL, func() bool {
			l, err := east.get("younger")
			return err == nil && dup(&l.Status)
		}, func() string { return "the younger lock of the name contends" })
	})

	t.Run("holder manager stopped, then back", func(t *testing.T) {
		sc := startScenario(t, second, "stop.example.com")
		holder, other := sc.holder, sc.other
		sc.w.strict.Store(false) // the stopped manager's status stays as it was: only R5 counts
		stopped := time.Now()
		holder.stop()
		t2, _ := sc.takenOver(t, globalG+globalD+8*time.Second)
		if d := time.Since(stopped); d < globalD || d > globalG+globalD+5*time.Second {
			t.Errorf("%s took over %v after the holder's manager stopped; want between D = %v and G + D + 5 s", other.name, d, globalD)
		}
		// Back again: the returning manager publishes the other cluster's term and takes
		// nothing.
		holder.start()
		waitSide(t, holder, "g", 15*time.Second, "publishes the other's term", heldElsewhere(other.name, t2))
		sc.w.strict.Store(true)
		consistently(t, 2*globalL, func() bool {
			h, err1 := holder.get("g")
			o, err2 := other.get("g")
			return err1 == nil && err2 == nil && heldElsewhere(other.name, t2)(&h.Status) && heldHereBy(sc.pods[other.name])(&o.Status) && o.Status.FencingToken == t2
		}, func() string { return "exactly one cluster holds the lock with token " + fmt.Sprint(t2) })
		sc.w.finish()
	})

	t.Run("holder pod deleted, a local candidate left: succession in the cluster (R8)", func(t *testing.T) {
		// A second candidate in each cluster, Ready a little later (FirstReady would pick it
		// otherwise as soon as the first).
		var second2 map[string]*corev1.Pod
		sc := startScenario(t, second, "succ.example.com", func(east, west *clusterSide) {
			time.Sleep(1100 * time.Millisecond)
			second2 = map[string]*corev1.Pod{"east": east.pod("q-east", "g"), "west": west.pod("q-west", "g")}
		})
		holder, other := sc.holder, sc.other
		if err := holder.c.Delete(bg(), sc.pods[holder.name], client.GracePeriodSeconds(0)); err != nil {
			t.Fatalf("delete the holder pod: %v", err)
		}
		waitSide(t, holder, "g", 5*time.Second, "Releasing", func(st *lockv1.DistributedLockStatus) bool {
			return st.Phase == lockv1.PhaseReleasing && st.FencingToken == sc.t1
		})
		releasing := time.Now()
		l := waitSide(t, holder, "g", globalD+8*time.Second, "succession to the local candidate", heldHereBy(second2[holder.name]))
		t2 := l.Status.FencingToken
		if t2 <= sc.t1 {
			t.Fatalf("the succession's token %d is not above %d", t2, sc.t1)
		}
		deleted, granted := sc.grants.gapBefore(t, t2)
		if gap := deleted.Sub(releasing); gap < globalD-watchLag {
			t.Errorf("%s deleted K %v after it published Releasing; want at least D = %v", holder.name, gap, globalD)
		}
		if gap := granted.Sub(deleted); gap > 2*time.Second {
			t.Errorf("the succession came %v after K was deleted; R8 needs no wait", gap)
		}
		waitSide(t, other, "g", 5*time.Second, "publishes the successor's term", heldElsewhere(holder.name, t2))
		sc.w.finish()
	})

	t.Run("holder pod deleted, no local candidate left", func(t *testing.T) {
		sc := startScenario(t, second, "pod.example.com")
		holder, other := sc.holder, sc.other
		if err := holder.c.Delete(bg(), sc.pods[holder.name], client.GracePeriodSeconds(0)); err != nil {
			t.Fatalf("delete the holder pod: %v", err)
		}
		waitSide(t, holder, "g", 5*time.Second, "Releasing", func(st *lockv1.DistributedLockStatus) bool {
			return st.Phase == lockv1.PhaseReleasing && st.FencingToken == sc.t1
		})
		releasing := time.Now()
		t2, deleted := sc.takenOver(t, 2*globalD+8*time.Second)
		if gap := deleted.Sub(releasing); gap < globalD-watchLag {
			t.Errorf("%s deleted K %v after it published Releasing; want at least D = %v", holder.name, gap, globalD)
		}
		waitSide(t, holder, "g", 5*time.Second, "publishes the other's term", heldElsewhere(other.name, t2))
		sc.w.finish()
	})
}
