package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
)

// The verbs run in-process against a real kube-apiserver (envtest) with the real controller
// granting locks from a real etcd (internal/testenv/controllertest, as the controller's own
// tests do).

var (
	env        *testenv.Env
	k8s        client.Client // uncached: tests assert through a live client
	kubeconfig string
	suite      *testenv.Suite
)

func TestMain(m *testing.M) {
	os.Exit(controllertest.RunTests(m, testenv.SuiteOptions{Kubeconfig: true}, func(s *testenv.Suite) error {
		suite, env, k8s, kubeconfig = s, s.Env, s.Client, s.Kubeconfig
		return nil
	}))
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
	f.stop = controllertest.ForNamespace(t, suite, f.ns)
	return f
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
	controllertest.CreateLock(f.t, k8s, f.ns, name, app, mutate)
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
