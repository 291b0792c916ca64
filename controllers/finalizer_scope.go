package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The finalizer policy (config/policy/finalizer_*.yaml) sets Finalizer on every lock its
// bindings match when the lock is created. A manager run with --watch-namespaces removes the
// finalizer only in those namespaces: a lock created elsewhere under a binding that matches
// every namespace keeps it for ever, and its delete (or its namespace's) hangs. Such a manager
// therefore refuses to start while a binding of the policy is not scoped: its
// namespaceSelector (or the policy's) must require something a namespace has to carry, a name
// (kubernetes.io/metadata.name) or a label, as docs/install.md says ("A manager that watches
// some namespaces"). Which namespaces carry it is the operator's to keep in line with the
// managers: several managers, each with its namespaces, may share one binding, so a name or
// label this manager does not watch is taken to be another manager's.

const (
	// FinalizerPolicyName is the MutatingAdmissionPolicy of config/policy that sets Finalizer.
	FinalizerPolicyName = "lockwarden-finalizer"
	// namespaceNameLabel is the label the API server sets on every namespace to its name.
	namespaceNameLabel = "kubernetes.io/metadata.name"
)

// CheckFinalizerScope returns an error when the finalizer policy, as installed, can set the
// finalizer on a lock in a namespace that no list of names bounds: for a manager that
// watches only some namespaces. A cluster that does not serve MutatingAdmissionPolicy (or has
// no such policy) passes.
func CheckFinalizerScope(ctx context.Context, c client.Reader, watched []string) error {
	var policy admissionv1.MutatingAdmissionPolicy
	switch err := c.Get(ctx, client.ObjectKey{Name: FinalizerPolicyName}, &policy); {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil // not installed, or not served: no finalizer at admission
	case err != nil:
		return fmt.Errorf("read MutatingAdmissionPolicy %s (the manager's role needs get on mutatingadmissionpolicies: config/rbac): %w", FinalizerPolicyName, err)
	}
	var bindings admissionv1.MutatingAdmissionPolicyBindingList
	if err := c.List(ctx, &bindings); err != nil {
		return fmt.Errorf("list MutatingAdmissionPolicyBindings (the manager's role needs list on mutatingadmissionpolicybindings: config/rbac): %w", err)
	}
	if problem := finalizerScopeProblem(&policy, bindings.Items, watched); problem != "" {
		return fmt.Errorf("--watch-namespaces=%s: %s", strings.Join(watched, ","), problem)
	}
	return nil
}

// finalizerScopeProblem says which bindings of policy are not scoped (scoped), and how to
// fix it; "" when all are.
func finalizerScopeProblem(policy *admissionv1.MutatingAdmissionPolicy, bindings []admissionv1.MutatingAdmissionPolicyBinding, watched []string) string {
	if policy.Spec.MatchConstraints != nil && scoped(policy.Spec.MatchConstraints.NamespaceSelector) {
		return "" // the policy itself is scoped
	}
	var open []string
	for i := range bindings {
		b := &bindings[i]
		if b.Spec.PolicyName != policy.Name {
			continue
		}
		if b.Spec.MatchResources == nil || !scoped(b.Spec.MatchResources.NamespaceSelector) {
			open = append(open, b.Name)
		}
	}
	if len(open) == 0 {
		return ""
	}
	slices.Sort(open)
	return fmt.Sprintf("MutatingAdmissionPolicyBinding %s sets the finalizer %s on DistributedLocks in every namespace, and this manager removes it only in the namespaces it watches: "+
		"a lock created elsewhere could never be deleted. Scope the binding with spec.matchResources.namespaceSelector "+
		"{matchExpressions: [{key: %s, operator: In, values: [%s]}]} (the Helm value watchNamespaces does it; or a label only watched namespaces carry), "+
		"or delete it (the manager then adds the finalizer itself)",
		strings.Join(open, ", "), Finalizer, namespaceNameLabel, strings.Join(watched, ", "))
}

// scoped reports whether sel matches only namespaces that carry something it names: a
// matchLabels entry, or an In or Exists requirement (a selector's requirements all apply, so
// one of these is enough). A selector of NotIn and DoesNotExist alone, an empty one or none
// matches namespaces created later that nobody thought of.
func scoped(sel *metav1.LabelSelector) bool {
	if sel == nil {
		return false
	}
	if len(sel.MatchLabels) > 0 {
		return true
	}
	return slices.ContainsFunc(sel.MatchExpressions, func(e metav1.LabelSelectorRequirement) bool {
		switch {
		case e.Key == corev1.LabelMetadataName && e.Operator == metav1.LabelSelectorOpExists:
			return false // every namespace carries its name label: no scope at all
		case e.Operator == metav1.LabelSelectorOpIn:
			return len(e.Values) > 0
		}
		return e.Operator == metav1.LabelSelectorOpExists
	})
}
