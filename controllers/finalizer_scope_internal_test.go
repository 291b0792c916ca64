package controllers

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestFinalizerScopeProblem: which installs of the finalizer policy a manager with
// --watch-namespaces refuses to start on.
func TestFinalizerScopeProblem(t *testing.T) {
	byName := func(op metav1.LabelSelectorOperator, names ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: namespaceNameLabel, Operator: op, Values: names}}}
	}
	binding := func(name, policy string, sel *metav1.LabelSelector) admissionv1.MutatingAdmissionPolicyBinding {
		b := admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: policy}}
		if sel != nil {
			b.Spec.MatchResources = &admissionv1.MatchResources{NamespaceSelector: sel}
		}
		return b
	}
	shipped := binding(FinalizerPolicyName, FinalizerPolicyName, nil)
	for _, tc := range []struct {
		name     string
		policy   *metav1.LabelSelector // the policy's own matchConstraints.namespaceSelector
		bindings []admissionv1.MutatingAdmissionPolicyBinding
		open     []string // the bindings the problem must name; none: no problem
	}{
		{"no binding", nil, nil, nil},
		{"the shipped binding: every namespace", nil, []admissionv1.MutatingAdmissionPolicyBinding{shipped}, []string{FinalizerPolicyName}},
		{"scoped by name (In)", nil, []admissionv1.MutatingAdmissionPolicyBinding{binding("b", FinalizerPolicyName, byName(metav1.LabelSelectorOpIn, "team-a", "team-b"))}, nil},
		{"scoped by name (matchLabels)", nil, []admissionv1.MutatingAdmissionPolicyBinding{binding("b", FinalizerPolicyName,
			&metav1.LabelSelector{MatchLabels: map[string]string{namespaceNameLabel: "team-a"}})}, nil},
		{"another manager's namespaces in the list: not this manager's to judge", nil, []admissionv1.MutatingAdmissionPolicyBinding{binding("b", FinalizerPolicyName, byName(metav1.LabelSelectorOpIn, "team-z"))}, nil},
		{"NotIn: every other namespace", nil, []admissionv1.MutatingAdmissionPolicyBinding{binding("b", FinalizerPolicyName, byName(metav1.LabelSelectorOpNotIn, "kube-system"))}, []string{"b"}},
		{"scoped by a label (matchLabels)", nil, []admissionv1.MutatingAdmissionPolicyBinding{binding("b", FinalizerPolicyName,
			&metav1.LabelSelector{MatchLabels: map[string]string{"lockwarden.io/shard": "3"}})}, nil},
		{"scoped by a label (Exists)", nil, []admissionv1.MutatingAdmissionPolicyBinding{binding("b", FinalizerPolicyName,
			&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "lockwarden.io/managed", Operator: metav1.LabelSelectorOpExists}}})}, nil},
		{"Exists on the name label: every namespace", nil, []admissionv1.MutatingAdmissionPolicyBinding{binding("b", FinalizerPolicyName, byName(metav1.LabelSelectorOpExists))}, []string{"b"}},
		{"DoesNotExist: every namespace without the label", nil, []admissionv1.MutatingAdmissionPolicyBinding{binding("b", FinalizerPolicyName,
			&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "lockwarden.io/unmanaged", Operator: metav1.LabelSelectorOpDoesNotExist}}})}, []string{"b"}},
		{"an empty selector: every namespace", nil, []admissionv1.MutatingAdmissionPolicyBinding{binding("b", FinalizerPolicyName, &metav1.LabelSelector{})}, []string{"b"}},
		{"another policy's binding: ignored", nil, []admissionv1.MutatingAdmissionPolicyBinding{binding("other", "someone-else", nil)}, nil},
		{"one scoped, one open: the open one named", nil, []admissionv1.MutatingAdmissionPolicyBinding{
			binding("a-scoped", FinalizerPolicyName, byName(metav1.LabelSelectorOpIn, "team-a")), binding("z-open", FinalizerPolicyName, nil)}, []string{"z-open"}},
		{"the policy itself scoped by name", byName(metav1.LabelSelectorOpIn, "team-a"), []admissionv1.MutatingAdmissionPolicyBinding{shipped}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy := &admissionv1.MutatingAdmissionPolicy{ObjectMeta: metav1.ObjectMeta{Name: FinalizerPolicyName}}
			if tc.policy != nil {
				policy.Spec.MatchConstraints = &admissionv1.MatchResources{NamespaceSelector: tc.policy}
			}
			got := finalizerScopeProblem(policy, tc.bindings, []string{"team-a"})
			if len(tc.open) == 0 {
				if got != "" {
					t.Fatalf("problem %q, want none", got)
				}
				return
			}
			for _, b := range tc.open {
				if !strings.Contains(got, "MutatingAdmissionPolicyBinding "+b) {
					t.Fatalf("problem %q does not name binding %s", got, b)
				}
			}
			if !strings.Contains(got, "values: [team-a]") {
				t.Fatalf("problem %q does not give the fix for the watched namespaces", got)
			}
		})
	}
}
