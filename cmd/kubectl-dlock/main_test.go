package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// The verbs run in-process against a real kube-apiserver (envtest) with the real controller
// granting locks from a real etcd, as controllers/suite_test.go does.

var (
	env        *testenv.Env
	etcd       *testenv.Etcd
	k8s        client.Client // uncached: tests assert through a live client
	kubeconfig string
	seq        atomic.Int64
)

func TestMain(m *testing.M) {
	code := testMain(m)
	if code == 0 {
		// client-go keeps idle keep-alive connections to the API server in its shared
		// transport cache after a verb returns; they are closed when the process exits.
		if err := goleak.Find(goleak.IgnoreTopFunction("k8s.io/klog/v2.(*loggingT).flushDaemon"),
			goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/log.(*loggerPromise).Fulfill"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/util/wait.BackoffUntilWithContext.func1"),
			goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*Typed[...]).updateUnfinishedWorkLoop"),
			goleak.IgnoreAnyFunction("k8s.io/client-go/util/workqueue.(*delayingType[...]).waitingLoop")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func testMain(m *testing.M) int {
	ctrl.SetLogger(logr.Discard())
	var err error
	if env, err = testenv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	dir, err := os.MkdirTemp("", "kubectl-dlock-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if etcd, err = testenv.StartEtcd(env.Root, filepath.Join(dir, "etcd")); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer etcd.Stop()
	kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if k8s, err = env.Client(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// dlock runs the plugin in-process against the test control plane.
func dlock(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append(args, "--kubeconfig", kubeconfig), &out, &errOut)
	t.Logf("kubectl dlock %s -> %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	return code, out.String(), errOut.String()
}

// fixture is one test's namespace, with a controller for it on a fresh etcd prefix.
type fixture struct {
	t    *testing.T
	ns   string
	stop func()
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "dlock-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	f.ns = ns.Name
	f.stop = f.startController()
	t.Cleanup(func() { f.stop() })
	return f
}

// startController runs a manager with the lockwarden controller for the fixture's
// namespace; the returned func stops it and waits.
func (f *fixture) startController() func() {
	f.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		f.t.Fatalf("etcd client: %v", err)
	}
	scheme, err := testenv.Scheme()
	if err != nil {
		f.t.Fatal(err)
	}
	mgr, err := manager.New(env.Config, manager.Options{
		Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{f.ns: {}}},
	})
	if err != nil {
		f.t.Fatalf("manager: %v", err)
	}
	engine := lease.NewEngine(cli, lease.WithPrefix(fmt.Sprintf("/kubectl-dlock-test/%d", seq.Add(1))))
	active, err := controllers.NewActive(controllers.ActiveConfig{
		Engine: engine, Manager: mgr, Identity: "test", ElectionTTL: 3 * time.Second, GrantTTL: 13 * time.Second,
		MaxConcurrentReconciles: 2, Metrics: controllers.NewMetrics(prometheus.NewRegistry()), Retry: 100 * time.Millisecond,
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
			f.t.Errorf("manager stopped: %v", err)
		}
		_ = cli.Close()
	}
}

// pod creates a pod labelled app=<app> and writes status as a kubelet or scheduler would.
func (f *fixture) pod(name, app string, status func(*corev1.PodStatus), opts ...func(*corev1.Pod)) *corev1.Pod {
	f.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
	}
	for _, o := range opts {
		o(p)
	}
	if err := k8s.Create(context.Background(), p); err != nil {
		f.t.Fatalf("create pod %s: %v", name, err)
	}
	f.setStatus(p, status)
	return p
}

// onNode binds the pod to a node: the API server then deletes it gracefully (30 s) and, with
// no kubelet here to finish, it stays terminating until the test's cleanup removes it.
func (f *fixture) onNode(p *corev1.Pod) {
	p.Spec.NodeName = "node-1"
	f.t.Cleanup(func() {
		_ = k8s.Delete(context.Background(), p, client.GracePeriodSeconds(0))
	})
}

// setStatus writes the pod's status through the status subresource (retrying conflicts).
func (f *fixture) setStatus(p *corev1.Pod, status func(*corev1.PodStatus)) {
	f.t.Helper()
	for range 10 {
		var cur corev1.Pod
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(p), &cur); err != nil {
			f.t.Fatalf("get pod %s: %v", p.Name, err)
		}
		status(&cur.Status)
		err := k8s.Status().Update(context.Background(), &cur)
		if err == nil {
			*p = cur
			return
		}
		if !apierrors.IsConflict(err) {
			f.t.Fatalf("update pod %s status: %v", p.Name, err)
		}
	}
	f.t.Fatalf("update pod %s status: conflicts", p.Name)
}

// editPod changes the pod's metadata or spec (retrying conflicts); a missing pod is fine.
func (f *fixture) editPod(p *corev1.Pod, mutate func(*corev1.Pod)) {
	for range 10 {
		var cur corev1.Pod
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(p), &cur); err != nil {
			return
		}
		mutate(&cur)
		if err := k8s.Update(context.Background(), &cur); !apierrors.IsConflict(err) {
			return
		}
	}
}

// lock creates a lock selecting app=<app>.
func (f *fixture) lock(name, app string, mutate func(*lockv1.DistributedLockSpec)) {
	f.t.Helper()
	l := &lockv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: lockv1.DistributedLockSpec{
			Candidates:           lockv1.Candidates{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}},
			LeaseDurationSeconds: 2,
		},
	}
	if mutate != nil {
		mutate(&l.Spec)
	}
	if err := k8s.Create(context.Background(), l); err != nil {
		f.t.Fatalf("create lock %s: %v", name, err)
	}
}

// get reads the lock through the live client.
func (f *fixture) get(name string) *lockv1.DistributedLock {
	f.t.Helper()
	var l lockv1.DistributedLock
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: name}, &l); err != nil {
		f.t.Fatalf("get lock %s: %v", name, err)
	}
	return &l
}

// waitFor polls the lock until cond holds, failing with its status after timeout.
func (f *fixture) waitFor(name, what string, cond func(*lockv1.DistributedLock) bool) *lockv1.DistributedLock {
	f.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l := f.get(name)
		if cond(l) {
			return l
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("lock %s: not %s within 20s; status %+v", name, what, l.Status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func heldBy(pod string) func(*lockv1.DistributedLock) bool {
	return func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseHeld && l.Status.Holder == pod
	}
}

// Pod states as a kubelet or kube-scheduler writes them.

func runningReady(s *corev1.PodStatus) {
	s.Phase = corev1.PodRunning
	s.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	s.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
}

func unschedulable(s *corev1.PodStatus) {
	s.Phase = corev1.PodPending
	s.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
		Message: "0/1 nodes are available: 1 Insufficient cpu.", LastTransitionTime: metav1.Now()}}
}

func notReady(s *corev1.PodStatus) {
	runningReady(s)
	s.Conditions[1].Status, s.Conditions[1].Reason = corev1.ConditionFalse, "ContainersNotReady"
	s.Conditions[1].Message = "containers with unready status: [app]"
	s.ContainerStatuses[0].Ready = false
}

// crashed: the container exited and the phase is still Running (the kubelet restarts it).
func crashed(s *corev1.PodStatus) {
	notReady(s)
	s.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}
	s.ContainerStatuses[0].RestartCount = 2
}

func succeeded(s *corev1.PodStatus) {
	notReady(s)
	s.Phase = corev1.PodSucceeded
	s.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
}
