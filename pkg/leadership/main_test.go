package leadership_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// env is one real control plane (kube-apiserver and etcd from ./bin) for every test here; k8s
// is an uncached admin client of it that plays the controller's part by writing status.
var (
	env *testenv.Env
	k8s client.Client
)

func TestMain(m *testing.M) {
	os.Exit(testenv.RunTests(m, true, func(e *testenv.Env) (err error) {
		env = e
		k8s, err = e.Client()
		return err
	}))
}

// namespace creates a fresh namespace for one test.
func namespace(t testing.TB) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "lead-"}}
	if err := k8s.Create(t.Context(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns.Name
}

// createLock creates a DistributedLock with no status.
func createLock(t testing.TB, ns, name string, leaseSeconds int32) client.ObjectKey {
	t.Helper()
	lock := &lockv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: lockv1.DistributedLockSpec{
			Candidates:           lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"app": "worker"})},
			LeaseDurationSeconds: leaseSeconds,
		},
	}
	if err := k8s.Create(t.Context(), lock); err != nil {
		t.Fatalf("create lock: %v", err)
	}
	return client.ObjectKeyFromObject(lock)
}

// setStatus writes the lock's status as the controller would, after mutate; it keeps
// maxFencingToken at or above fencingToken and never lowers it (the CRD refuses otherwise).
// It returns when the API server has acknowledged the write. A conflict (an elector's
// release patched the lock meanwhile) is retried on a fresh read, as the controller does.
func setStatus(t testing.TB, key client.ObjectKey, mutate func(*lockv1.DistributedLockStatus)) {
	t.Helper()
	for range 10 {
		var lock lockv1.DistributedLock
		if err := k8s.Get(t.Context(), key, &lock); err != nil {
			t.Fatalf("get lock: %v", err)
		}
		prevMax := lock.Status.MaxFencingToken
		mutate(&lock.Status)
		lock.Status.MaxFencingToken = max(lock.Status.MaxFencingToken, prevMax, lock.Status.FencingToken)
		lock.Status.ControllerEpoch = max(lock.Status.ControllerEpoch, 1)
		err := k8s.Status().Update(t.Context(), &lock)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) {
			t.Fatalf("update lock status: %v", err)
		}
	}
	t.Fatalf("update lock status: 10 conflicts")
}

// held grants the lock to (name, uid) with token under a lease of leaseSeconds.
func held(name string, uid types.UID, token int64, leaseSeconds int32) func(*lockv1.DistributedLockStatus) {
	return func(s *lockv1.DistributedLockStatus) {
		s.Phase, s.Holder, s.HolderUID, s.FencingToken, s.TermLeaseSeconds = lockv1.PhaseHeld, name, uid, token, leaseSeconds
	}
}

// releasing moves the current term to Releasing.
func releasing(s *lockv1.DistributedLockStatus) { s.Phase = lockv1.PhaseReleasing }

// event is one callback call as the recorder saw it.
type event struct {
	kind   string // "start", "stop" or "holder"
	token  int64
	holder string
	at     time.Time
}

func (e event) String() string {
	switch e.kind {
	case "start":
		return fmt.Sprintf("start(%d)", e.token)
	case "holder":
		return fmt.Sprintf("holder(%s,%d)", e.holder, e.token)
	}
	return e.kind
}

// recorder records callbacks and notices any two running at once. OnStartedLeading blocks
// until its context is cancelled, as a workload that runs for the whole term does.
type recorder struct {
	mu     sync.Mutex
	events []event

	active  atomic.Int32
	overlap atomic.Bool
	// stopGate, when set, makes OnStoppedLeading wait until it is closed.
	stopGate chan struct{}
}

func (r *recorder) enter() {
	if r.active.Add(1) > 1 {
		r.overlap.Store(true)
	}
}

func (r *recorder) exit() { r.active.Add(-1) }

func (r *recorder) add(ev event) {
	ev.at = time.Now()
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

func (r *recorder) callbacks() leadership.Callbacks {
	return leadership.Callbacks{
		OnStartedLeading: func(ctx context.Context, token int64) {
			r.enter()
			defer r.exit()
			r.add(event{kind: "start", token: token})
			<-ctx.Done()
		},
		OnStoppedLeading: func() {
			r.enter()
			defer r.exit()
			r.add(event{kind: "stop"})
			if r.stopGate != nil {
				<-r.stopGate
			}
		},
		OnNewHolder: func(holder string, token int64) {
			r.enter()
			defer r.exit()
			r.add(event{kind: "holder", holder: holder, token: token})
		},
	}
}

// snapshot returns the events so far.
func (r *recorder) snapshot() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

// String lists the events, for messages.
func (r *recorder) String() string {
	var b strings.Builder
	for i, ev := range r.snapshot() {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(ev.String())
	}
	return b.String()
}

// waitEvents waits until the events, as a string, are want.
func (r *recorder) waitEvents(t *testing.T, want string) []event {
	t.Helper()
	eventually(t, 10*time.Second, func() bool { return r.String() == want }, func() string {
		return fmt.Sprintf("callbacks: got %q, want %q", r.String(), want)
	})
	return r.snapshot()
}

// eventually polls cond every 2 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, msg())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// read is one consistent read of the lock as the elector's transport saw it.
type read struct {
	sent, done time.Time
	ok         bool // 200 OK
}

// reads records the elector's consistent reads of one lock (GETs, not watches) from inside its
// client transport: sent is taken after the elector's own send time S, done when the
// response headers arrived.
type reads struct {
	path string
	mu   sync.Mutex
	all  []read
}

type recordingTransport struct {
	next http.RoundTripper
	r    *reads
}

// lockGet reports whether req is a consistent read of the lock at path: a GET, not a watch.
func lockGet(req *http.Request, path string) bool {
	return req.Method == http.MethodGet && req.URL.Path == path && !req.URL.Query().Has("watch")
}

func (rt recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !lockGet(req, rt.r.path) {
		return rt.next.RoundTrip(req)
	}
	sent := time.Now()
	resp, err := rt.next.RoundTrip(req)
	rd := read{sent: sent, done: time.Now(), ok: err == nil && resp.StatusCode == http.StatusOK}
	rt.r.mu.Lock()
	rt.r.all = append(rt.r.all, rd)
	rt.r.mu.Unlock()
	return resp, err
}

// snapshot returns the reads so far, in order of completion.
func (r *reads) snapshot() []read {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]read(nil), r.all...)
}

// sentAfter counts the reads sent after t.
func (r *reads) sentAfter(t time.Time) int {
	n := 0
	for _, rd := range r.snapshot() {
		if rd.sent.After(t) {
			n++
		}
	}
	return n
}

// sentBetween counts the reads sent after a and before b.
func (r *reads) sentBetween(a, b time.Time) int {
	n := 0
	for _, rd := range r.snapshot() {
		if rd.sent.After(a) && rd.sent.Before(b) {
			n++
		}
	}
	return n
}

// okCount counts the successful reads.
func (r *reads) okCount() int {
	n := 0
	for _, rd := range r.snapshot() {
		if rd.ok {
			n++
		}
	}
	return n
}

// lastOK returns the newest successful read.
func (r *reads) lastOK() (read, bool) {
	all := r.snapshot()
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].ok {
			return all[i], true
		}
	}
	return read{}, false
}

// harness is one test's lock, proxy and elector.
type harness struct {
	key   client.ObjectKey
	proxy *apiproxy.Proxy
	reads *reads
	rec   *recorder
	el    *leadership.Elector
}

// newHarness creates a lock of leaseSeconds and a proxy to the API server. The elector is
// started by run.
func newHarness(t testing.TB, leaseSeconds int32) *harness {
	t.Helper()
	return harnessFor(t, createLock(t, namespace(t), "leader", leaseSeconds))
}

// harnessFor is the harness of the lock key, with a proxy to the API server.
func harnessFor(t testing.TB, key client.ObjectKey) *harness {
	t.Helper()
	p, err := apiproxy.Start(env.Config, apiproxy.Options{})
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	rs := &reads{path: "/apis/lockwarden.io/v1alpha1/namespaces/" + key.Namespace + "/distributedlocks/" + key.Name}
	return &harness{key: key, proxy: p, reads: rs, rec: &recorder{}}
}

// config is an elector configuration for (name, uid) through the proxy, its reads recorded.
func (h *harness) config(name string, uid types.UID) leadership.Config {
	rc := h.proxy.Config()
	rc.Wrap(func(next http.RoundTripper) http.RoundTripper { return recordingTransport{next: next, r: h.reads} })
	return leadership.Config{
		Config:    rc,
		Namespace: h.key.Namespace,
		Lock:      h.key.Name,
		Identity:  uid,
		Name:      name,
		Callbacks: h.rec.callbacks(),
	}
}

// run starts an elector with cfg; cleanup stops it and checks that Run returned nil, in time,
// with no two callbacks ever running at once.
func (h *harness) run(t *testing.T, cfg leadership.Config) *leadership.Elector {
	t.Helper()
	el, err := leadership.New(cfg)
	if err != nil {
		t.Fatalf("New: %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		h.proxy.SetMode(apiproxy.Pass)
		if h.rec.stopGate != nil {
			select {
			case <-h.rec.stopGate:
			default:
				close(h.rec.stopGate)
			}
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return 10s after its context was cancelled")
		}
		if el.Valid() {
			t.Errorf("Valid() after Run returned = true, want false")
		}
		if h.rec.overlap.Load() {
			t.Errorf("two callbacks ran at once; calls: %s", h.rec)
		}
	})
	h.el = el
	return el
}

// waitReads waits until the elector has completed n successful consistent reads.
func (h *harness) waitReads(t *testing.T, n int) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool { return h.reads.okCount() >= n },
		func() string { return fmt.Sprintf("successful reads: got %d, want %d", h.reads.okCount(), n) })
}
