package controllers_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/lockwarden/lockwarden/controllers"
	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

var (
	env    *testenv.Env
	etcd   *testenv.Etcd
	scheme *runtime.Scheme
	k8s    client.WithWatch // uncached: tests assert through a live client
	seq    atomic.Int64
)

func TestMain(m *testing.M) {
	code := run(m)
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreTopFunction("k8s.io/klog/v2.(*loggingT).flushDaemon"),
			goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/log.(*loggerPromise).Fulfill"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/util/wait.BackoffUntilWithContext.func1"),
			goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Typed[...]).updateUnfinishedWorkLoop"),
			goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func run(m *testing.M) int {
	ctrl.SetLogger(logrDiscard())
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	dir, err := os.MkdirTemp("", "lockwarden-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if etcd, err = testenv.StartEtcd(env.Root, dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer etcd.Stop()
	if scheme, err = testenv.Scheme(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if k8s, err = env.Client(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// fixture is one test's namespace, etcd prefix and running controller.
type fixture struct {
	t      testing.TB
	ns     string
	prefix string
	cli    *clientv3.Client
	engine *lease.Engine
	stop   func()
}

// newFixture creates a namespace and starts a controller (manager + election) for it on a
// fresh etcd prefix.
func newFixture(t testing.TB) *fixture {
	t.Helper()
	f := &fixture{t: t, prefix: fmt.Sprintf("/lockwarden-test/%d", seq.Add(1))}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "ctrl-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	f.ns = ns.Name
	f.cli = newEtcdClient(t)
	f.engine = lease.NewEngine(f.cli, lease.WithPrefix(f.prefix))
	f.stop = f.startController("replica-a", 3*time.Second)
	t.Cleanup(func() { f.stop() })
	return f
}

func newEtcdClient(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// startController runs a manager with the lockwarden controller (its own election session)
// limited to the fixture's namespace; the returned func stops it and waits.
func (f *fixture) startController(identity string, electionTTL time.Duration) func() {
	f.t.Helper()
	mgr, err := manager.New(env.Config, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:                  cacheFor(f.ns),
	})
	if err != nil {
		f.t.Fatalf("manager: %v", err)
	}
	active, err := controllers.NewActive(controllers.ActiveConfig{
		Engine: f.engine, Manager: mgr, Identity: identity,
		ElectionTTL: electionTTL, GrantTTL: electionTTL + 10*time.Second, MaxConcurrentReconciles: 2,
		Metrics: controllers.NewMetrics(prometheus.NewRegistry()), Retry: 100 * time.Millisecond,
	})
	if err != nil {
		f.t.Fatalf("controller config: %v", err)
	}
	if err := active.AddToManager(context.Background()); err != nil {
		f.t.Fatalf("add controller: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	var once atomic.Bool
	return func() {
		if once.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil && !strings.Contains(err.Error(), "context canceled") {
			f.t.Errorf("manager %s stopped: %v", identity, err)
		}
	}
}
