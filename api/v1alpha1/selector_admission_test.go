package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// The API server itself rejects selectors with invalid label keys, values and operators, and
// selectors past the bounds, with a message naming the field (CEL with the Kubernetes format
// library on a bounded schema); before, all of these passed admission and only the controller
// reported them.

// keyHelp and valueHelp end the API server's messages for an invalid label key and value.
const (
	keyHelp   = `a label key is an optional DNS subdomain prefix and "/", then a name of at most 63 alphanumerics, "-", "_" and "." that begins and ends with an alphanumeric`
	valueHelp = `a label value is empty or at most 63 alphanumerics, "-", "_" and "." that begins and ends with an alphanumeric`
)

func req(key string, op metav1.LabelSelectorOperator, values ...string) lockv1.LabelSelectorRequirement {
	return lockv1.LabelSelectorRequirement{Key: key, Operator: op, Values: values}
}

func exprs(rs ...lockv1.LabelSelectorRequirement) *lockv1.LabelSelector {
	return &lockv1.LabelSelector{MatchExpressions: rs}
}

// longKey is a valid label key of the most characters: a 253-character prefix, "/", and a
// 63-character name.
func longKey() string {
	prefix := strings.Join([]string{strings.Repeat("a", 63), strings.Repeat("b", 63), strings.Repeat("c", 63), strings.Repeat("d", 61)}, ".")
	return prefix + "/" + strings.Repeat("n", 63)
}

func manyLabels(n int) *lockv1.LabelSelector {
	s := &lockv1.LabelSelector{MatchLabels: map[string]lockv1.LabelValue{}}
	for i := range n {
		s.MatchLabels[fmt.Sprintf("k%d", i)] = "v"
	}
	return s
}

func manyValues(n int) []string {
	var vs []string
	for i := range n {
		vs = append(vs, fmt.Sprintf("v%d", i))
	}
	return vs
}

func TestSelectorRejectedAtAdmission(t *testing.T) {
	ns := namespace(t)
	exists := metav1.LabelSelectorOpExists
	in := metav1.LabelSelectorOpIn
	tests := []struct {
		name string
		sel  *lockv1.LabelSelector
		want string // the API server's message must contain it
		// clean: the message has no line saying that rules were not checked (only a bound
		// or a cap of the schema, past any realistic mistake, stops the rules)
		clean bool
	}{
		{"key with a bang", lockv1.MatchLabels(map[string]string{"bad key!": "x"}),
			`spec.candidates.selector.matchLabels: Invalid value: invalid label key "bad key!": ` + keyHelp, true},
		{"value with a space", lockv1.MatchLabels(map[string]string{"app": "x y"}),
			`spec.candidates.selector.matchLabels[app]: Invalid value: "x y": invalid label value "x y": ` + valueHelp, true},
		{"value of 64 characters", lockv1.MatchLabels(map[string]string{"app": strings.Repeat("v", 64)}),
			`spec.candidates.selector.matchLabels[app]: Invalid value: "` + strings.Repeat("v", 64) + `": invalid label value`, true},
		{"value past the cap", lockv1.MatchLabels(map[string]string{"app": strings.Repeat("v", 129)}),
			`spec.candidates.selector.matchLabels.app: Too long: may not be more than 128 bytes`, false},
		{"key prefix in capitals", lockv1.MatchLabels(map[string]string{"Example.com/app": "x"}),
			`spec.candidates.selector.matchLabels: Invalid value: invalid label key "Example.com/app": ` + keyHelp, true},
		{"operator Near", exprs(req("app", exists), req("app", "Near", "x")),
			`spec.candidates.selector.matchExpressions[1].operator: Invalid value: unsupported value "Near": must be one of In, NotIn, Exists, DoesNotExist`, true},
		{"operator in lower case", exprs(req("app", "in", "x")),
			`spec.candidates.selector.matchExpressions[0].operator: Invalid value: unsupported value "in"`, true},
		{"operator empty", exprs(req("app", "")),
			`spec.candidates.selector.matchExpressions[0].operator: Invalid value: unsupported value ""`, true},
		{"expression key with a space", exprs(req("x y", exists)),
			`spec.candidates.selector.matchExpressions[0].key: Invalid value: "x y": invalid label key "x y": ` + keyHelp, true},
		{"expression key of 318 characters", exprs(req(longKey()+"n", exists)),
			`spec.candidates.selector.matchExpressions[0].key: Invalid value: "` + longKey() + `n": invalid label key`, true},
		{"expression value with a space", exprs(req("app", in, "ok", "x y")),
			`spec.candidates.selector.matchExpressions[0].values: Invalid value: invalid label value "x y": ` + valueHelp, true},
		{"expression value of 64 characters", exprs(req("app", in, strings.Repeat("v", 64))),
			`spec.candidates.selector.matchExpressions[0].values: Invalid value: invalid label value "` + strings.Repeat("v", 64) + `"`, true},
		{"Exists with values", exprs(req("app", exists, "x")),
			`spec.candidates.selector.matchExpressions[0].values: Invalid value: must be non-empty for In and NotIn and empty for Exists and DoesNotExist`, true},
		{"33 matchLabels", manyLabels(lockv1.MaxSelectorLabels + 1),
			`spec.candidates.selector.matchLabels: Too many: 33: must have at most 32 items`, false},
		{"33 matchExpressions", exprs(func() []lockv1.LabelSelectorRequirement {
			var rs []lockv1.LabelSelectorRequirement
			for i := range lockv1.MaxSelectorExpressions + 1 {
				rs = append(rs, req(fmt.Sprintf("k%d", i), exists))
			}
			return rs
		}()...), `spec.candidates.selector.matchExpressions: Too many: 33: must have at most 32 items`, false},
		{"65 values", exprs(req("app", in, manyValues(lockv1.MaxSelectorValues+1)...)),
			`spec.candidates.selector.matchExpressions[0].values: Too many: 65: must have at most 64 items`, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := validSpec()
			spec.Candidates.Selector = tt.sel
			lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bad-selector-%d", i), Namespace: ns}, Spec: spec}
			err := k8s.Create(context.Background(), lock)
			if err == nil {
				t.Fatalf("create accepted, want rejected with %q", tt.want)
			}
			t.Logf("API server: %v", err)
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create error = %v, want an Invalid error", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("create error = %q, want it to contain %q", err, tt.want)
			}
			if unchecked := strings.Contains(err.Error(), "were not checked"); tt.clean && unchecked {
				t.Errorf("create error = %q, want no line about unchecked rules", err)
			}
			// The controller's own check agrees on everything but the counts.
			if tt.clean && lockv1.SelectorProblem(tt.sel) == "" {
				t.Errorf("SelectorProblem = \"\" (valid), the API server rejected it: %v", err)
			}
		})
	}
}

// TestSelectorBoundsAccepted: selectors at every bound, and valid keys and values of every
// kind, pass admission.
func TestSelectorBoundsAccepted(t *testing.T) {
	ns := namespace(t)
	var rs []lockv1.LabelSelectorRequirement
	for i := range lockv1.MaxSelectorExpressions - 1 {
		rs = append(rs, req(fmt.Sprintf("example.com/k%d", i), metav1.LabelSelectorOpDoesNotExist))
	}
	rs = append(rs, req(longKey(), metav1.LabelSelectorOpNotIn, append(manyValues(lockv1.MaxSelectorValues-1), strings.Repeat("v", 63))...))
	labels := manyLabels(lockv1.MaxSelectorLabels - 2)
	labels.MatchLabels[longKey()] = lockv1.LabelValue(strings.Repeat("v", 63))
	labels.MatchLabels["empty"] = ""
	tests := []struct {
		name string
		sel  *lockv1.LabelSelector
	}{
		{"32 matchLabels, a key of 317 and a value of 63 characters, an empty value", labels},
		{"32 matchExpressions, 64 values", exprs(rs...)},
		{"every operator", exprs(req("a", metav1.LabelSelectorOpIn, "x"), req("b", metav1.LabelSelectorOpNotIn, "y"),
			req("c", metav1.LabelSelectorOpExists), req("d", metav1.LabelSelectorOpDoesNotExist))},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := validSpec()
			spec.Candidates.Selector = tt.sel
			lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("bounds-%d", i), Namespace: ns}, Spec: spec}
			if err := k8s.Create(context.Background(), lock); err != nil {
				t.Fatalf("create: %v, want accepted", err)
			}
			if problem := lockv1.SelectorProblem(tt.sel); problem != "" {
				t.Errorf("SelectorProblem = %q, want valid (the controller and the API server must agree)", problem)
			}
		})
	}
}
