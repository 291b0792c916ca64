// Package controllertest runs the lockwarden controller in tests: the TestMain of a package
// whose tests need it (RunTests: control plane, CRDs, the controller's etcd, a goroutine check
// that knows what a stopped manager leaves) and, per test, a manager with the controller for
// one namespace on an etcd prefix of its own (Start, ForNamespace). It is apart from
// internal/testenv so that the packages that need only a control plane do not link the
// controller.
package controllertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// managerLeftovers are the goroutines that outlive a stopped controller-runtime manager and
// client-go in the same process: klog's flush daemon, controller-runtime's log promise,
// workqueue loops that end on their own shortly after, and client-go's idle keep-alive
// connections to the API server in its shared transport cache (closed when the process exits).
var managerLeftovers = []goleak.Option{
	goleak.IgnoreTopFunction("k8s.io/klog/v2.(*loggingT).flushDaemon"),
	goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/log.(*loggerPromise).Fulfill"),
	goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/util/wait.BackoffUntilWithContext.func1"),
	goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Typed[...]).updateUnfinishedWorkLoop"),
	goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop"),
}

// RunTests is the body of the TestMain of a package whose tests run the controller: it starts
// the control plane and the controller's etcd (plus what opts asks for), discards
// controller-runtime's log, runs the tests and stops everything; a passing run then fails if
// goroutines are left beyond what a stopped manager leaves. It returns the exit code.
func RunTests(m *testing.M, opts testenv.SuiteOptions, setup func(*testenv.Suite) error) int {
	ctrl.SetLogger(logr.Discard())
	opts.Etcd, opts.CheckLeaks = true, true
	opts.IgnoreLeaks = append(opts.IgnoreLeaks, managerLeftovers...)
	return testenv.RunSuite(m, opts, setup)
}

// Backend is one test's part of the controller's etcd: a client, closed at the test's
// cleanup, and an engine on a prefix that no other test of the process uses.
type Backend struct {
	Client *clientv3.Client
	Engine *lease.Engine
	Prefix string
}

var prefixes atomic.Int64

// NewBackend connects to the etcd at endpoint and makes an engine on a fresh prefix.
func NewBackend(t testing.TB, endpoint string) *Backend {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	prefix := fmt.Sprintf("/lockwarden-test/%d", prefixes.Add(1))
	return &Backend{Client: cli, Engine: lease.NewEngine(cli, lease.WithPrefix(prefix)), Prefix: prefix}
}

// Config is one controller replica.
type Config struct {
	// Namespace is the only namespace the manager's cache sees.
	Namespace string
	// Engine is the replica's etcd engine; replicas of one lockwarden share one.
	Engine *lease.Engine
	// Identity names the replica in the election. Default "controller".
	Identity string
	// ElectionTTL is the replica's election session TTL; its grant lease's TTL is 10 s more.
	// Default 3 s.
	ElectionTTL time.Duration
	// ClusterName is the manager's --cluster-name (Global locks); empty: unset. With it,
	// Global is required: Start registers the cluster (RegisterCluster), failing the test
	// on a refusal.
	ClusterName string
	// Global is the shared etcd's side of Global locks (with ClusterName).
	Global *lease.Global
	// ElectionLossExpected: the test makes the replica lose its election (a slow link to
	// etcd); the manager then stops on its own with "controller election lost", as a real
	// one does to be restarted, and that stop is logged instead of failing the test.
	ElectionLossExpected bool
}

// Start runs a manager with the lockwarden controller (its own election session, two
// concurrent reconciles, 100 ms retries) and returns a func that stops it and waits, once;
// a later call does nothing. A manager that stops with an error other than its context's
// cancellation fails the test.
func Start(t testing.TB, cfg *rest.Config, c Config) (stop func()) {
	t.Helper()
	if c.Identity == "" {
		c.Identity = "controller"
	}
	if c.ElectionTTL == 0 {
		c.ElectionTTL = 3 * time.Second
	}
	scheme, err := testenv.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{c.Namespace: {}}},
	})
	if err != nil {
		t.Fatalf("manager: %v", err)
	}
	var cluster lease.ClusterID
	if c.ClusterName != "" {
		if cluster, err = controllers.RegisterCluster(context.Background(), mgr.GetAPIReader(), c.Global, c.ClusterName, c.Engine.Prefix()); err != nil {
			t.Fatalf("register cluster %s: %v", c.ClusterName, err)
		}
	}
	active, err := controllers.NewActive(controllers.ActiveConfig{
		Engine: c.Engine, Manager: mgr, Identity: c.Identity,
		ElectionTTL: c.ElectionTTL, GrantTTL: c.ElectionTTL + 10*time.Second, MaxConcurrentReconciles: 2,
		Metrics: controllers.NewMetrics(prometheus.NewRegistry()), Retry: 100 * time.Millisecond,
		Cluster: cluster, Global: c.Global,
	})
	if err != nil {
		t.Fatalf("controller config: %v", err)
	}
	if err := active.AddToManager(context.Background()); err != nil {
		t.Fatalf("add controller: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			err := <-done
			switch {
			case err == nil || strings.Contains(err.Error(), "context canceled"):
			case c.ElectionLossExpected && strings.Contains(err.Error(), "election lost"):
				t.Logf("manager %s stopped, as expected: %v", c.Identity, err)
			default:
				t.Errorf("manager %s stopped: %v", c.Identity, err)
			}
		})
	}
}

// CreateLock creates through c the lock ns/name over the pods labelled app=<app>, with a 2 s
// lease, after mutate (nil: no change); an error fails the test.
func CreateLock(t testing.TB, c client.Client, ns, name, app string, mutate func(*lockv1.DistributedLockSpec)) *lockv1.DistributedLock {
	t.Helper()
	l := &lockv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: lockv1.DistributedLockSpec{
			Candidates:           lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"app": app})},
			LeaseDurationSeconds: 2,
		},
	}
	if mutate != nil {
		mutate(&l.Spec)
	}
	if err := c.Create(context.Background(), l); err != nil {
		t.Fatalf("create lock %s: %v", name, err)
	}
	return l
}

// ForNamespace starts one controller replica for ns on a Backend of its own, stopped at the
// test's cleanup; the returned func stops it earlier.
func ForNamespace(t testing.TB, s *testenv.Suite, ns string) (stop func()) {
	t.Helper()
	b := NewBackend(t, s.Etcd.Endpoint)
	stop = Start(t, s.Config, Config{Namespace: ns, Engine: b.Engine})
	t.Cleanup(stop)
	return stop
}
