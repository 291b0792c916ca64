package controllertest

import (
	"context"
	"fmt"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
)

// FixtureLabel marks the namespaces of a suite's fixtures: the finalizer policy's binding is
// scoped to them (ScopeFinalizerBinding), as it must be for managers run with
// --watch-namespaces (every manager of a suite watches its fixture's namespace only;
// CheckFinalizerScope).
const FixtureLabel = "lockwarden.io/test-fixture"

// ScopeFinalizerBinding limits the shipped finalizer binding to namespaces labelled
// FixtureLabel (docs/install.md: a binding for managers that watch some namespaces).
func ScopeFinalizerBinding(c client.Client) error {
	var b admissionv1.MutatingAdmissionPolicyBinding
	if err := c.Get(context.Background(), client.ObjectKey{Name: controllers.FinalizerPolicyName}, &b); err != nil {
		return fmt.Errorf("read the finalizer binding: %w", err)
	}
	b.Spec.MatchResources = &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{FixtureLabel: "true"}}}
	if err := c.Update(context.Background(), &b); err != nil {
		return fmt.Errorf("scope the finalizer binding: %w", err)
	}
	return nil
}

// FixtureNamespace creates a namespace named from prefix, under the finalizer binding that
// ScopeFinalizerBinding scoped.
func FixtureNamespace(t testing.TB, c client.Client, prefix string) *corev1.Namespace {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix, Labels: map[string]string{FixtureLabel: "true"}}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return ns
}

// GlobalLock makes spec a Global lock for globalName with a 6 s lease (the least allowed).
func GlobalLock(globalName string) func(*lockv1.DistributedLockSpec) {
	return func(s *lockv1.DistributedLockSpec) {
		s.Scope, s.GlobalName, s.LeaseDurationSeconds = lockv1.ScopeGlobal, globalName, lockv1.MinGlobalLeaseDurationSeconds
	}
}
