package controllers_test

// Tests from the adversarial review of issue 23 (batched grants, the watch echo, the grant
// Event budget, the cache-based first grant, the finalizer policy). Each drives the real
// Reconciler against the suite's real kube-apiserver and etcd; where a test needs the
// manager's cache to lag (an informer behind the API server, as under load or while a new
// epoch's caches catch up), its Reconciler reads locks through laggingCache, which answers a
// Get of a frozen lock with the copy taken earlier and passes everything else through to the
// live API server. They fail on main at 0de24ae; the controls (marked) pass.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/yaml"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// laggingCache is the manager's cached client as it is while its informer lags: a Get of a
// lock frozen with freeze answers the copy taken then; everything else goes to the live API
// server. A List's field selectors are dropped (they name the manager's cache indexes, which
// the API server does not have; the label selector still applies).
type laggingCache struct {
	ctrl.Client
	mu     sync.Mutex
	frozen map[ctrl.ObjectKey]*lockv1.DistributedLock
}

func (c *laggingCache) freeze(l *lockv1.DistributedLock) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.frozen == nil {
		c.frozen = map[ctrl.ObjectKey]*lockv1.DistributedLock{}
	}
	c.frozen[ctrl.ObjectKeyFromObject(l)] = l.DeepCopy()
}

func (c *laggingCache) thaw() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.frozen = nil
}

func (c *laggingCache) Get(ctx context.Context, key ctrl.ObjectKey, obj ctrl.Object, opts ...ctrl.GetOption) error {
	if l, ok := obj.(*lockv1.DistributedLock); ok {
		c.mu.Lock()
		f := c.frozen[key]
		c.mu.Unlock()
		if f != nil {
			f.DeepCopyInto(l)
			return nil
		}
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c *laggingCache) List(ctx context.Context, list ctrl.ObjectList, opts ...ctrl.ListOption) error {
	var keep []ctrl.ListOption
	for _, o := range opts {
		if _, ok := o.(ctrl.MatchingFields); !ok {
			keep = append(keep, o)
		}
	}
	return c.Client.List(ctx, list, keep...)
}

// replica is one controller replica's Reconciler, run turn by turn by the test (no manager,
// no workqueue): its own election session and grant lease on the fixture's etcd prefix.
type replica struct {
	r      *controllers.Reconciler
	cache  *laggingCache
	events *events.FakeRecorder
	stop   func()
}

// reviewFixture is a namespace and an etcd prefix with no controller running.
func reviewFixture(t *testing.T) *fixture {
	t.Helper()
	ns := fixtureNamespace(t, "review-scale-")
	waitFinalizerPolicy(t, ns.Name)
	b := controllertest.NewBackend(t, etcd.Endpoint)
	return &fixture{t: t, ns: ns.Name, prefix: b.Prefix, cli: b.Client, engine: b.Engine, stop: func() {}}
}

// waitFinalizerPolicy waits until the suite's API server runs the finalizer policy (it loads
// a policy asynchronously) and serves the CRD: a dry-run create in ns shows the finalizer.
func waitFinalizerPolicy(t *testing.T, ns string) {
	t.Helper()
	eventually(t, 60*time.Second, func() bool {
		probe := newLock(ns, "probe", "a", nil)
		return k8s.Create(bg(), probe, ctrl.DryRunAll) == nil && slices.Contains(probe.Finalizers, controllers.Finalizer)
	}, func() string { return "the finalizer policy never set the finalizer on a dry-run create" })
}

// newReplica elects identity (waiting in the election queue behind any replica still
// holding it) and returns its Reconciler; stop releases the election and closes the
// sessions (also at the test's cleanup).
func newReplica(t *testing.T, f *fixture, identity string, mutate func(*controllers.Reconciler)) *replica {
	t.Helper()
	ctx, cancel := context.WithTimeout(bg(), 20*time.Second)
	defer cancel()
	es, err := f.engine.NewSession(ctx, 5*time.Second)
	if err != nil {
		t.Fatalf("election session: %v", err)
	}
	election, err := es.Acquire(ctx, controllers.ElectionKey, identity)
	if err != nil {
		t.Fatalf("elect %s: %v", identity, err)
	}
	grants, err := f.engine.NewSession(ctx, 60*time.Second)
	if err != nil {
		t.Fatalf("grant lease: %v", err)
	}
	rp := &replica{cache: &laggingCache{Client: k8s}, events: events.NewFakeRecorder(1000)}
	rp.r = &controllers.Reconciler{
		Client: rp.cache, APIReader: k8s, Recorder: rp.events, Engine: f.engine,
		Grants: grants, Election: election, Metrics: controllers.NewMetrics(prometheus.NewRegistry()),
	}
	if mutate != nil {
		mutate(rp.r)
	}
	var once sync.Once
	rp.stop = func() {
		once.Do(func() {
			c, cancel := context.WithTimeout(bg(), 5*time.Second)
			defer cancel()
			_ = election.Release(c)
			_ = es.Close(c)
			grants.Orphan() // as the manager does: the grants outlive the replica
		})
	}
	t.Cleanup(rp.stop)
	return rp
}

// turn runs one reconcile of ns/name; an error is returned, not fatal (a failed status
// write is part of some scenarios).
func (rp *replica) turn(ns, name string) (reconcile.Result, error) {
	ctx, cancel := context.WithTimeout(bg(), 30*time.Second)
	defer cancel()
	return rp.r.Reconcile(ctx, reconcile.Request{NamespacedName: objectKey(ns, name)})
}

// mustTurn runs one reconcile and fails the test on an error.
func (rp *replica) mustTurn(t *testing.T, ns, name string) {
	t.Helper()
	if _, err := rp.turn(ns, name); err != nil {
		t.Fatalf("reconcile %s/%s: %v", ns, name, err)
	}
}

// recorded drains the Events recorded so far.
func (rp *replica) recorded() []string {
	var out []string
	for {
		select {
		case e := <-rp.events.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// deleteKey deletes the lock's etcd key by hand: an operator's etcdctl del, or the grant
// lease's expiry (DESIGN.md: "key vanished").
func (f *fixture) deleteKey(name string) {
	f.t.Helper()
	if _, err := f.cli.Delete(bg(), f.engine.Path(f.ns+"/"+name)); err != nil {
		f.t.Fatalf("delete key of %s: %v", name, err)
	}
}

func (f *fixture) holding(name string) lease.Holding {
	f.t.Helper()
	h, err := f.engine.Inspect(bg(), f.ns+"/"+name)
	if err != nil {
		f.t.Fatalf("inspect %s: %v", name, err)
	}
	return h
}

// mustHaveFinalizer checks that the lock was created with the manager's finalizer (the
// shipped policy, installed on the suite's API server); the cache-based first grant applies
// only to such a lock.
func mustHaveFinalizer(t *testing.T, l *lockv1.DistributedLock) {
	t.Helper()
	for _, fin := range l.Finalizers {
		if fin == controllers.Finalizer {
			return
		}
	}
	t.Fatalf("lock %s created with finalizers %v: the suite's finalizer policy (config/policy) did not run", l.Name, l.Finalizers)
}

// deletedLock creates lock l selecting app=selector, deletes it (a replica's turn drops its
// finalizer: it never had a term) and returns its copy from before the delete: what a
// lagging informer may still show.
func deletedLock(t *testing.T, f *fixture, selector string) *lockv1.DistributedLock {
	t.Helper()
	snapshot := f.get(f.lock("l", selector, nil).Name)
	mustHaveFinalizer(t, snapshot)
	y := newReplica(t, f, "review-y", nil)
	defer y.stop()
	if err := k8s.Delete(bg(), snapshot); err != nil {
		t.Fatalf("delete lock: %v", err)
	}
	y.mustTurn(t, f.ns, "l") // deleting, no term: the finalizer goes
	eventually(t, 10*time.Second, func() bool {
		return apierrors.IsNotFound(k8s.Get(bg(), objectKey(f.ns, "l"), &lockv1.DistributedLock{}))
	}, func() string { return "old lock still present" })
	return snapshot
}

// TestReviewScaleStaleFirstGrantSkipsLockDelay: firstGrant (apply.go) lets a grant be
// decided on the cached lock when the cached status has controllerEpoch 0, arguing that a
// stale cache only costs a failed status write, after which "the next turn reads uncached
// and adopts or discards the unpublished grant (decideUnpublished)". But controllerEpoch 0
// in a cached copy says nothing about the status the API server has now; and
// decideUnpublished adopts an unpublished grant without any wait when the published term is
// Releasing (it assumes the grant was decided after that term's lock delay). So: p is
// granted and goes NotReady (Releasing, lockDelay 60 s), the key vanishes, and a turn on a
// cache still showing the lock as created grants q at once; the next (uncached) turn adopts
// q, and q leads while p's term is still within its lock delay: the lock delay, counted from
// the Releasing acknowledgement, is skipped.
func TestReviewScaleStaleFirstGrantSkipsLockDelay(t *testing.T) {
	f := reviewFixture(t)
	rp := newReplica(t, f, "review-a", nil)
	p := f.pod("p", "app")
	created := f.lock("l", "app", func(s *lockv1.DistributedLockSpec) {
		s.LeaseDurationSeconds = 30
		s.LockDelaySeconds = ptr.To[int32](60)
	})
	snapshot := f.get(created.Name) // what a lagging informer may still show later: epoch 0
	mustHaveFinalizer(t, snapshot)

	rp.mustTurn(t, f.ns, "l")
	if l := f.get("l"); !heldBy("p")(l) {
		t.Fatalf("after the first turn: %s, want Held by p", describe(l))
	}
	f.pod("q", "app")
	f.setReady(p, false)
	rp.mustTurn(t, f.ns, "l")
	releasingAt := time.Now()
	if l := f.get("l"); l.Status.Phase != lockv1.PhaseReleasing || l.Status.Holder != "p" {
		t.Fatalf("after p went NotReady: %s, want Releasing by p", describe(l))
	}
	f.deleteKey("l")

	// Control: on the lock as the API server has it, the vanished key of a NotReady holder
	// grants nobody before the lock delay.
	rp.mustTurn(t, f.ns, "l")
	if l := f.get("l"); l.Status.Phase != lockv1.PhaseReleasing || l.Status.Holder != "p" || f.holding("l").Token != 0 {
		t.Fatalf("control, after the key vanished: %s, key token %d; want Releasing by p and no key", describe(l), f.holding("l").Token)
	}

	// The cache still shows the lock as created (no status, epoch 0).
	rp.cache.freeze(snapshot)
	_, err := rp.turn(f.ns, "l")
	rp.cache.thaw()
	h := f.holding("l")
	t.Logf("turn on the lagging cache: err=%v; etcd key now holder=%s token=%d", err, h.Holder, h.Token)

	rp.mustTurn(t, f.ns, "l") // the next turn, uncached as firstGrant's comment promises
	l := f.get("l")
	if since := time.Since(releasingAt); l.Status.Phase == lockv1.PhaseHeld && l.Status.Holder == "q" && since < 60*time.Second {
		t.Fatalf("lock Held by q (token %d) %.1f s after p's Releasing was acknowledged, lockDelay 60 s: the grant decided on the "+
			"lagging cache (controllerEpoch 0 there) was adopted without the wait; status: %s", l.Status.FencingToken, since.Seconds(), describe(l))
	}
}

// TestReviewScaleStaleFirstGrantRecreatedLock: a lock deleted (the previous epoch's replica
// ended it and dropped the finalizer) and created again under the same name with another
// selector. The new epoch's cache still shows the old lock (epoch 0, finalizer, not
// deleting); firstGrant decides on it, so the old lock's selector, strategy and lease are
// granted in etcd under the name; the status write fails, and the next, uncached turn finds
// an unpublished grant on the new lock and adopts it (decideUnpublished: no holder
// published): the new lock is Held by a pod its selector does not match, a candidate of the
// old lock, which still follows the lock by name.
func TestReviewScaleStaleFirstGrantRecreatedLock(t *testing.T) {
	f := reviewFixture(t)
	f.pod("a-0", "a")
	f.pod("b-0", "b")
	snapshot := deletedLock(t, f, "a")
	f.lock("l", "b", nil)

	x := newReplica(t, f, "review-x", nil)
	x.cache.freeze(snapshot) // x's informer has not caught up with the delete and the create
	_, err := x.turn(f.ns, "l")
	x.cache.thaw()
	h := f.holding("l")
	t.Logf("turn on the lagging cache: err=%v; etcd key now holder=%s token=%d", err, h.Holder, h.Token)

	x.mustTurn(t, f.ns, "l")
	l := f.get("l")
	if l.Status.HolderUID != "" && l.Status.Holder != "b-0" {
		t.Fatalf("lock l (selector app=b) published %s as holder, a pod of the deleted lock's selector app=a: "+
			"the grant was decided on the deleted lock's cached copy; status: %s", l.Status.Holder, describe(l))
	}
}

// TestReviewScaleStaleFirstGrantDeletedLockOrphansKey: as above without the new lock. The
// grant decided on the deleted lock's cached copy creates its key; its status write finds no
// lock; nothing ever deletes the key (the lock is NotFound, so no turn runs for it) and it
// stays on the grant lease, which the active replica renews: a grant with no lock and no
// finalizer, which DESIGN.md's "deletion always goes through the term's end" excludes.
func TestReviewScaleStaleFirstGrantDeletedLockOrphansKey(t *testing.T) {
	f := reviewFixture(t)
	f.pod("a-0", "a")
	snapshot := deletedLock(t, f, "a")

	x := newReplica(t, f, "review-x", nil)
	x.cache.freeze(snapshot)
	_, err := x.turn(f.ns, "l")
	x.cache.thaw()
	t.Logf("turn on the lagging cache: err=%v", err)
	for range 3 { // what the workqueue would run next: the lock is NotFound
		x.mustTurn(t, f.ns, "l")
	}
	if h := f.holding("l"); h.Token != 0 {
		t.Fatalf("etcd key of the deleted lock l: holder %s token %d lease %x, want none: a grant with no lock, kept alive by the grant lease", h.Holder, h.Token, int64(h.Lease))
	}
}

// TestReviewScaleFinalizerPolicyUnwatchedNamespace: the finalizer policy's binding matches
// every DistributedLock in the cluster, but a manager run with --watch-namespaces (a
// documented flag, and the sharding design of docs/scale.md) reconciles only its
// namespaces. A lock created elsewhere gets lockwarden.io/release at admission and nothing
// ever removes it: deleting the lock (or its namespace) hangs. Before the policy, a lock no
// manager reconciled had no finalizer and was deleted at once.
//
// (Rewritten with the fix. On the suite's API server, with the shipped binding as it is
// installed for a manager of every namespace, the lock in the unwatched namespace was still
// present 10 s after its delete, finalizers [lockwarden.io/release].) Now, on a control plane
// of its own: with the shipped binding, a manager with --watch-namespaces refuses to start
// (CheckFinalizerScope, which cmd/lockwarden runs before starting); with the binding as the
// Helm chart renders it for watchNamespaces, it starts, the watched namespace's lock gets the
// finalizer and the unwatched namespace's lock none, and both go once deleted.
func TestReviewScaleFinalizerPolicyUnwatchedNamespace(t *testing.T) {
	cp, c := ownControlPlane(t)
	ctx := t.Context()
	var watched, other corev1.Namespace
	for _, ns := range []*corev1.Namespace{&watched, &other} {
		ns.GenerateName = "scope-"
		if err := c.Create(ctx, ns); err != nil {
			t.Fatalf("create namespace: %v", err)
		}
	}
	if err := cp.Apply(ctx, c, "config/policy/finalizer_policy.yaml", "config/policy/finalizer_binding.yaml"); err != nil {
		t.Fatal(err)
	}
	err := controllers.CheckFinalizerScope(ctx, c, []string{watched.Name})
	if err == nil || !strings.Contains(err.Error(), "MutatingAdmissionPolicyBinding lockwarden-finalizer") {
		t.Fatalf("start check with the shipped (every namespace) binding and --watch-namespaces=%s: %v, want a refusal naming the binding", watched.Name, err)
	}
	t.Logf("refused as it should: %v", err)

	applyRendered(t, c, "MutatingAdmissionPolicyBinding", "--set", "watchNamespaces={"+watched.Name+"}")
	if err := controllers.CheckFinalizerScope(ctx, c, []string{watched.Name}); err != nil {
		t.Fatalf("start check with the chart's binding for watchNamespaces=%s: %v", watched.Name, err)
	}
	// The API server loads a binding's change asynchronously: wait until dry-run creates show
	// the scoped binding in force.
	eventually(t, 30*time.Second, func() bool {
		in, out := newLock(watched.Name, "probe", "x", nil), newLock(other.Name, "probe", "x", nil)
		return c.Create(ctx, in, ctrl.DryRunAll) == nil && slices.Contains(in.Finalizers, controllers.Finalizer) &&
			c.Create(ctx, out, ctrl.DryRunAll) == nil && !slices.Contains(out.Finalizers, controllers.Finalizer)
	}, func() string { return "the scoped binding never took effect" })
	startControllerOn(t, cp, watched.Name)

	mine, elsewhere := newLock(watched.Name, "mine", "x", nil), newLock(other.Name, "elsewhere", "x", nil)
	for _, l := range []*lockv1.DistributedLock{mine, elsewhere} {
		if err := c.Create(ctx, l); err != nil {
			t.Fatalf("create lock: %v", err)
		}
	}
	if !slices.Contains(mine.Finalizers, controllers.Finalizer) || len(elsewhere.Finalizers) != 0 {
		t.Fatalf("created with finalizers %v (watched namespace) and %v (unwatched), want [%s] and none", mine.Finalizers, elsewhere.Finalizers, controllers.Finalizer)
	}
	for _, l := range []*lockv1.DistributedLock{mine, elsewhere} {
		if err := c.Delete(ctx, l); err != nil {
			t.Fatalf("delete lock: %v", err)
		}
	}
	for _, l := range []*lockv1.DistributedLock{mine, elsewhere} {
		eventually(t, 10*time.Second, func() bool {
			return apierrors.IsNotFound(c.Get(ctx, ctrl.ObjectKeyFromObject(l), &lockv1.DistributedLock{}))
		}, func() string {
			return fmt.Sprintf("lock %s/%s still present 10 s after its delete", l.Namespace, l.Name)
		})
	}
}

// applyRendered renders charts/lockwarden with ./bin/helm (make helm) and args, and creates
// or updates each object of kind it renders.
func applyRendered(t *testing.T, c ctrl.Client, kind string, args ...string) {
	t.Helper()
	out, err := testenv.HelmTemplate(t.TempDir(), args...)
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, out)
	}
	found := 0
	for _, doc := range strings.Split(string(out), "\n---") {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("decode rendered object: %v\n%s", err, doc)
		}
		if u.GetKind() != kind {
			continue
		}
		found++
		cur := u.DeepCopy()
		err := c.Get(t.Context(), ctrl.ObjectKeyFromObject(&u), cur)
		switch {
		case err == nil:
			u.SetResourceVersion(cur.GetResourceVersion())
			err = c.Update(t.Context(), &u)
		case apierrors.IsNotFound(err):
			err = c.Create(t.Context(), &u)
		}
		if err != nil {
			t.Fatalf("apply rendered %s %s: %v", kind, u.GetName(), err)
		}
	}
	if found == 0 {
		t.Fatalf("helm template %v rendered no %s", args, kind)
	}
}

// TestReviewScaleKeyVanishedEventLimited: grantevents.go says "Warnings and term-end Events
// are not limited", but a term that ends because its key vanished (actRegrant: publishEnd
// KeyVanished, then grantTo) has no End Event of its own: its only Event is the grant's,
// reason Regranted, and that goes through the grant Event budget. Over the budget (here a
// budget of one Event; in production after 100 grants within 10 s, as when the grant lease
// expired and every key vanished at once), the first such term end becomes a
// GrantEventsLimited Event (no KeyVanished nor Regranted reason), and every later one gets
// no Event at all.
func TestReviewScaleKeyVanishedEventLimited(t *testing.T) {
	f := reviewFixture(t)
	rp := newReplica(t, f, "review-a", func(r *controllers.Reconciler) {
		r.GrantEventRate, r.GrantEventBurst = 1e-6, 1
	})
	f.pod("p", "app")
	mustHaveFinalizer(t, f.get(f.lock("l", "app", nil).Name))
	rp.mustTurn(t, f.ns, "l")
	if l := f.get("l"); !heldBy("p")(l) {
		t.Fatalf("after the first turn: %s, want Held by p", describe(l))
	}
	first := rp.recorded()
	for vanish := 1; vanish <= 2; vanish++ {
		before := f.get("l").Status.FencingToken
		f.deleteKey("l")
		rp.mustTurn(t, f.ns, "l")
		l := f.get("l")
		if !heldBy("p")(l) || l.Status.FencingToken == before {
			t.Fatalf("after key vanish %d: %s, want Held by p with a new token", vanish, describe(l))
		}
		evs := rp.recorded()
		ok := false
		for _, e := range evs {
			ok = ok || strings.Contains(e, lockv1.ReasonKeyVanished) || strings.Contains(e, lockv1.ReasonRegranted)
		}
		if !ok {
			t.Fatalf("key vanish %d ended the term of token %d (history: %s) but the Events recorded for it were %q (the first grant's: %q): "+
				"a term end whose Event was rate limited away", vanish, before, historyReasons(l), evs, first)
		}
	}
}

func historyReasons(l *lockv1.DistributedLock) string {
	var parts []string
	for _, h := range l.Status.History {
		parts = append(parts, fmt.Sprintf("%d:%s", h.Token, h.Reason))
	}
	return strings.Join(parts, ",")
}

// TestReviewScaleStaleFirstGrantIgnoresSuspend: the common case of a lagging cache, with no
// failover and no vanished key. A lock is created and at once suspended (a GitOps tool's
// create then patch, or kubectl apply then kubectl patch). The turn woken by the create event
// reads the cache, which shows the lock as created: controllerEpoch 0, so firstGrant skips
// the uncached read, and the lock is granted in etcd. Its status write fails (the spec
// changed the resourceVersion); the next, uncached turn sees suspend: true and an
// unpublished grant, and adopts it (decideUnpublished runs before the suspend check): a
// suspended lock is published Held, its pod leads, and the lock then goes through Releasing
// and the lock delay. With the uncached read before the grant (main before issue 23) the
// lock is Suspended with no holder.
func TestReviewScaleStaleFirstGrantIgnoresSuspend(t *testing.T) {
	f := reviewFixture(t)
	rp := newReplica(t, f, "review-a", nil)
	f.pod("p", "app")
	created := f.lock("l", "app", nil)
	snapshot := f.get(created.Name)
	mustHaveFinalizer(t, snapshot)
	f.editLock("l", func(l *lockv1.DistributedLock) { l.Spec.Suspend = true })

	rp.cache.freeze(snapshot) // the create event's view; the edit's event has not arrived
	_, err := rp.turn(f.ns, "l")
	rp.cache.thaw()
	h := f.holding("l")
	t.Logf("turn on the lagging cache: err=%v; etcd key now holder=%s token=%d", err, h.Holder, h.Token)

	rp.mustTurn(t, f.ns, "l")
	if l := f.get("l"); l.Status.HolderUID != "" || l.Status.Phase != lockv1.PhaseSuspended {
		t.Fatalf("lock suspended before the manager saw it: %s, want Suspended with no holder (a grant decided on the cached "+
			"copy from before the suspend was adopted)", describe(l))
	}
}

// TestReviewScaleStaleFirstGrantOfDeletedLock: as above with a delete instead of the
// suspend: created, deleted at once (the finalizer from the policy holds it). The turn on the
// create event's view grants p; the uncached turn that follows adopts the grant on the
// deleting lock and publishes p Held: a lock deleted before any grant gets a term, p leads
// it, and its deletion now waits for the term's end. On main before issue 23 the deleting
// lock's first turn drops the finalizer and the lock goes.
func TestReviewScaleStaleFirstGrantOfDeletedLock(t *testing.T) {
	f := reviewFixture(t)
	rp := newReplica(t, f, "review-a", nil)
	f.pod("p", "app")
	created := f.lock("l", "app", nil)
	snapshot := f.get(created.Name)
	mustHaveFinalizer(t, snapshot)
	if err := k8s.Delete(bg(), snapshot); err != nil {
		t.Fatalf("delete lock: %v", err)
	}

	rp.cache.freeze(snapshot)
	_, err := rp.turn(f.ns, "l")
	rp.cache.thaw()
	h := f.holding("l")
	t.Logf("turn on the lagging cache: err=%v; etcd key now holder=%s token=%d", err, h.Holder, h.Token)

	var held []string
	for range 3 { // the turns the workqueue would run next
		var l lockv1.DistributedLock
		if err := k8s.Get(bg(), objectKey(f.ns, "l"), &l); apierrors.IsNotFound(err) {
			break
		} else if err != nil {
			t.Fatalf("get lock: %v", err)
		}
		if l.Status.HolderUID != "" {
			held = append(held, describe(&l))
		}
		rp.mustTurn(t, f.ns, "l")
	}
	var l lockv1.DistributedLock
	err = k8s.Get(bg(), objectKey(f.ns, "l"), &l)
	if len(held) > 0 || err == nil {
		t.Fatalf("lock deleted before any grant: published holders %q, still present after 3 turns: %v (%s); want it gone with no term",
			held, err == nil, describe(&l))
	}
}
