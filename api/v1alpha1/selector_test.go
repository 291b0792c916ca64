package v1alpha1_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

func TestSelectorProblem(t *testing.T) {
	req := func(k string, op metav1.LabelSelectorOperator, vs ...string) lockv1.LabelSelectorRequirement {
		return lockv1.LabelSelectorRequirement{Key: k, Operator: op, Values: vs}
	}
	tests := []struct {
		name string
		sel  *lockv1.LabelSelector
		want string // "" means valid
	}{
		{"valid labels", &lockv1.LabelSelector{MatchLabels: map[string]lockv1.LabelValue{"app": "web", "example.com/tier": ""}}, ""},
		{"valid expressions", &lockv1.LabelSelector{MatchExpressions: []lockv1.LabelSelectorRequirement{
			req("app", metav1.LabelSelectorOpIn, "a", "b"), req("x", metav1.LabelSelectorOpExists)}}, ""},
		{"missing", nil, "spec.candidates.selector: required"},
		{"key with a space", &lockv1.LabelSelector{MatchLabels: map[string]lockv1.LabelValue{"app name": "x"}},
			`spec.candidates.selector.matchLabels: invalid label key "app name": name part must consist of alphanumeric characters`},
		{"first bad key in key order", &lockv1.LabelSelector{MatchLabels: map[string]lockv1.LabelValue{"z z": "x", "a a": "x"}},
			`invalid label key "a a"`},
		{"bad value", &lockv1.LabelSelector{MatchLabels: map[string]lockv1.LabelValue{"app": "x y"}},
			`spec.candidates.selector.matchLabels["app"]: invalid label value "x y"`},
		{"bad prefix", &lockv1.LabelSelector{MatchLabels: map[string]lockv1.LabelValue{"Example.com/app": "x"}},
			`invalid label key "Example.com/app": prefix part`},
		{"expression key", &lockv1.LabelSelector{MatchExpressions: []lockv1.LabelSelectorRequirement{
			req("app", metav1.LabelSelectorOpExists), req("-app", metav1.LabelSelectorOpExists)}},
			`spec.candidates.selector.matchExpressions[1].key: invalid label key "-app"`},
		{"expression operator", &lockv1.LabelSelector{MatchExpressions: []lockv1.LabelSelectorRequirement{req("app", "Near", "x")}},
			`spec.candidates.selector.matchExpressions[0].operator: unsupported value "Near"`},
		{"expression value", &lockv1.LabelSelector{MatchExpressions: []lockv1.LabelSelectorRequirement{req("app", metav1.LabelSelectorOpIn, "ok", "not ok")}},
			`spec.candidates.selector.matchExpressions[0].values[1]: invalid label value "not ok"`},
		{"In without values", &lockv1.LabelSelector{MatchExpressions: []lockv1.LabelSelectorRequirement{req("app", metav1.LabelSelectorOpIn)}},
			`spec.candidates.selector: `},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := lockv1.SelectorProblem(tt.sel)
			if tt.want == "" {
				if got != "" {
					t.Fatalf("SelectorProblem = %q, want valid", got)
				}
				return
			}
			if !strings.Contains(got, tt.want) {
				t.Errorf("SelectorProblem = %q, want it to contain %q", got, tt.want)
			}
			if strings.Contains(got, "\n") {
				t.Errorf("SelectorProblem = %q, want one line", got)
			}
		})
	}
}
