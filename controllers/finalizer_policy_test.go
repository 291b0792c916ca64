package controllers_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
)

// The finalizer policy (config/policy/finalizer_*.yaml), on a control plane of its own so
// that "off" really is off (the package's shared API server gets config/policy from other
// tests): without the policy the manager writes a new lock twice (its finalizer, then the
// status with the grant); with it, the lock is created with the finalizer and the manager
// writes it once. Counted from a watch of the lock from before its creation: every write of
// an object is one watch event.
func TestFinalizerPolicy(t *testing.T) {
	cp, c := ownControlPlane(t)
	ctx := t.Context()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "policy-"}}
	if err := c.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	readyPod(t, c, ns.Name, "a-0", "a")
	startControllerOn(t, cp, ns.Name)

	t.Run("off", func(t *testing.T) {
		w := writesUntilHeld(t, c, ns.Name, "off", nil)
		if w.finalizerAtCreate {
			t.Fatalf("lock created with finalizers %v, want none without the policy", w.createdFinalizers)
		}
		if want := []string{"finalizer", "status"}; !slices.Equal(w.writes, want) {
			t.Fatalf("writes of a new lock without the policy = %v, want %v (the manager's own finalizer, then the grant)", w.writes, want)
		}
	})

	if err := cp.Apply(ctx, c, "config/policy/finalizer_policy.yaml", "config/policy/finalizer_binding.yaml"); err != nil {
		t.Fatal(err)
	}
	// The API server loads a new policy asynchronously: wait until a dry-run create shows it.
	eventually(t, 30*time.Second, func() bool {
		probe := newLock(ns.Name, "probe", "a", nil)
		return c.Create(ctx, probe, client.DryRunAll) == nil && slices.Contains(probe.Finalizers, controllers.Finalizer)
	}, func() string { return "the finalizer policy never set the finalizer on a dry-run create" })

	t.Run("on", func(t *testing.T) {
		w := writesUntilHeld(t, c, ns.Name, "on", nil)
		if !w.finalizerAtCreate {
			t.Fatalf("lock created with finalizers %v, want %s set by the policy", w.createdFinalizers, controllers.Finalizer)
		}
		if want := []string{"status"}; !slices.Equal(w.writes, want) {
			t.Fatalf("writes of a new lock with the policy = %v, want %v (only the grant)", w.writes, want)
		}
	})

	t.Run("on, with another finalizer", func(t *testing.T) {
		w := writesUntilHeld(t, c, ns.Name, "other", []string{"example.com/keep"})
		if want := []string{"example.com/keep", controllers.Finalizer}; !slices.Equal(w.createdFinalizers, want) {
			t.Fatalf("lock created with finalizers %v, want %v", w.createdFinalizers, want)
		}
		if want := []string{"status"}; !slices.Equal(w.writes, want) {
			t.Fatalf("writes = %v, want %v", w.writes, want)
		}
	})

	t.Run("on, deleted", func(t *testing.T) {
		// The policy matches CREATE only: the manager's removal of its finalizer is not undone,
		// and the lock goes.
		l := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns.Name, Name: "on"}}
		if err := c.Delete(ctx, l); err != nil {
			t.Fatalf("delete lock: %v", err)
		}
		eventually(t, 30*time.Second, func() bool {
			return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(l), l))
		}, func() string { return fmt.Sprintf("lock still there: finalizers %v, %s", l.Finalizers, describe(l)) })
	})
}

// ownControlPlane starts a control plane for the test alone (none of config/policy installed)
// and returns it with a client, until the test ends.
func ownControlPlane(t *testing.T) (*testenv.Env, client.WithWatch) {
	t.Helper()
	cp, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Stop() })
	c, err := cp.Client()
	if err != nil {
		t.Fatal(err)
	}
	return cp, c
}

// policyWrites is what a watch saw of one new lock until it was Held.
type policyWrites struct {
	createdFinalizers []string
	finalizerAtCreate bool
	writes            []string // after the create, in order: "finalizer", "status" or "other"
}

// writesUntilHeld creates the lock (with finalizers) and classifies every write the watch
// shows until the lock is Held, and for 2 s after (a late write would count too).
func writesUntilHeld(t *testing.T, c client.WithWatch, ns, name string, finalizers []string) policyWrites {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var list lockv1.DistributedLockList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatalf("list locks: %v", err)
	}
	// From the list's resourceVersion: every event after it, the lock's creation included.
	w, err := c.Watch(ctx, &lockv1.DistributedLockList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
	if err != nil {
		t.Fatalf("watch locks: %v", err)
	}
	defer w.Stop()
	l := newLock(ns, name, "a", finalizers)
	if err := c.Create(ctx, l); err != nil {
		t.Fatalf("create lock %s: %v", name, err)
	}
	var out policyWrites
	var last *lockv1.DistributedLock
	var settle <-chan time.Time
	for {
		select {
		case <-settle:
			return out
		case <-ctx.Done():
			t.Fatalf("lock %s: not Held within 30 s; writes %v; %s", name, out.writes, describe(last))
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("lock %s: watch closed; writes %v", name, out.writes)
			}
			got, isLock := ev.Object.(*lockv1.DistributedLock)
			if !isLock || got.Name != name {
				continue
			}
			switch {
			case ev.Type == watch.Added:
				out.createdFinalizers = got.Finalizers
				out.finalizerAtCreate = slices.Contains(got.Finalizers, controllers.Finalizer)
			case ev.Type == watch.Modified && !slices.Equal(last.Finalizers, got.Finalizers):
				out.writes = append(out.writes, "finalizer")
			case ev.Type == watch.Modified && last.Status.Phase != got.Status.Phase:
				out.writes = append(out.writes, "status")
			default:
				out.writes = append(out.writes, "other "+string(ev.Type))
			}
			last = got
			if got.Status.Phase == lockv1.PhaseHeld && settle == nil {
				settle = time.After(2 * time.Second)
			}
		}
	}
}

func newLock(ns, name, app string, finalizers []string) *lockv1.DistributedLock {
	return &lockv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Finalizers: finalizers},
		Spec: lockv1.DistributedLockSpec{
			Candidates:           lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"app": app})},
			LeaseDurationSeconds: 2,
		},
	}
}

// readyPod creates a pod labelled app=<app> and sets it Running and Ready, as a kubelet would.
func readyPod(t *testing.T, c client.Client, ns, name, app string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
	}
	if err := c.Create(t.Context(), p); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
	if err := c.Status().Update(t.Context(), p); err != nil {
		t.Fatalf("set pod %s ready: %v", name, err)
	}
}

// startControllerOn runs a manager with the lockwarden controller against cp, limited to ns,
// on a fresh prefix of the package's etcd, until the test ends.
func startControllerOn(t *testing.T, cp *testenv.Env, ns string) {
	t.Helper()
	b := controllertest.NewBackend(t, etcd.Endpoint)
	t.Cleanup(controllertest.Start(t, cp.Config, controllertest.Config{Namespace: ns, Engine: b.Engine, Identity: "policy-test"}))
}
