package v1alpha1

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// SelectorProblem returns a one-line reason, naming the field, when sel (spec.candidates
// .selector) is not a valid label selector, and "" when it is. The API server rejects such a
// selector when a lock is created or its selector changed; a lock stored before the CRD
// checked keys and values (an update that leaves an invalid selector as it is passes, by CEL
// ratcheting) still reaches the controller, which reports this in its Valid condition. The
// first problem in field order is reported (matchLabels by key order, then matchExpressions
// by index).
func SelectorProblem(sel *LabelSelector) string {
	const field = "spec.candidates.selector"
	if sel == nil {
		return field + ": required"
	}
	keys := make([]string, 0, len(sel.MatchLabels))
	for k := range sel.MatchLabels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Sprintf("%s.matchLabels: invalid label key %q: %s", field, k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(string(sel.MatchLabels[k])); len(errs) > 0 {
			return fmt.Sprintf("%s.matchLabels[%q]: invalid label value %q: %s", field, k, sel.MatchLabels[k], strings.Join(errs, "; "))
		}
	}
	for i, e := range sel.MatchExpressions {
		at := fmt.Sprintf("%s.matchExpressions[%d]", field, i)
		if errs := validation.IsQualifiedName(e.Key); len(errs) > 0 {
			return fmt.Sprintf("%s.key: invalid label key %q: %s", at, e.Key, strings.Join(errs, "; "))
		}
		switch e.Operator {
		case metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn, metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist:
		default:
			return fmt.Sprintf("%s.operator: unsupported value %q: must be one of In, NotIn, Exists, DoesNotExist", at, e.Operator)
		}
		for j, v := range e.Values {
			if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
				return fmt.Sprintf("%s.values[%d]: invalid label value %q: %s", at, j, v, strings.Join(errs, "; "))
			}
		}
	}
	if _, err := sel.AsSelector(); err != nil {
		return fmt.Sprintf("%s: %v", field, err)
	}
	return ""
}
