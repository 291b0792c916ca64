package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Bounds of a LabelSelector. They let the API server afford to check every key and value: the
// CEL cost of a rule grows with the sizes the schema allows. The schema also caps a key at 512
// and a value at 128 bytes, above the label rules' own 317 and 63 characters, so that a
// realistic mistake gets the label rule's message and the caps only bound the cost. A
// selector past a bound or a cap is refused as too long or too many, and then the API server
// adds a line saying that some rules were not checked.
const (
	// MaxSelectorLabels is the most entries matchLabels may have.
	MaxSelectorLabels = 32
	// MaxSelectorExpressions is the most requirements matchExpressions may have.
	MaxSelectorExpressions = 32
	// MaxSelectorValues is the most values one requirement may list.
	MaxSelectorValues = 64
)

// LabelSelector selects pods by label. Its JSON is metav1.LabelSelector's, and it matches as
// metav1.LabelSelector does; unlike that type it is bounded (MaxSelectorLabels,
// MaxSelectorExpressions, MaxSelectorValues, MaxLabelKeyLength, MaxLabelValueLength), so that
// the API server rejects an invalid label key, value or operator itself, with a message naming
// the field (CEL with the Kubernetes format library). It must not be empty.
//
// +structType=atomic
// +kubebuilder:validation:XValidation:rule="(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",message="selector must have at least one matchLabels entry or matchExpressions requirement",reason=FieldValueRequired
type LabelSelector struct {
	// MatchLabels is a map of {key,value} pairs, each equivalent to a matchExpressions
	// requirement with operator In and that one value; the requirements are ANDed. At most 32
	// entries; keys are label keys (an optional DNS subdomain prefix and "/", then a name of
	// at most 63 characters), values are label values (at most 63 characters).
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, !format.qualifiedName().validate(k).hasValue())",messageExpression="'invalid label key \"' + self.filter(k, format.qualifiedName().validate(k).hasValue())[0] + '\": a label key is an optional DNS subdomain prefix and \"/\", then a name of at most 63 alphanumerics, \"-\", \"_\" and \".\" that begins and ends with an alphanumeric'",reason=FieldValueInvalid
	// +optional
	MatchLabels map[string]LabelValue `json:"matchLabels,omitempty"`

	// MatchExpressions is a list of label selector requirements; the requirements are ANDed.
	// At most 32.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	MatchExpressions []LabelSelectorRequirement `json:"matchExpressions,omitempty"`
}

// LabelValue is a label value: at most 63 characters, empty or beginning and ending with an
// alphanumeric character, with '-', '_', '.' and alphanumerics between.
//
// +kubebuilder:validation:MaxLength=128
// +kubebuilder:validation:XValidation:rule="!format.labelValue().validate(self).hasValue()",messageExpression="'invalid label value \"' + self + '\": a label value is empty or at most 63 alphanumerics, \"-\", \"_\" and \".\" that begins and ends with an alphanumeric'",reason=FieldValueInvalid
type LabelValue string

// LabelSelectorRequirement is a key, an operator and values, as in metav1.LabelSelector.
//
// The operator is a rule, not an enum: a value outside an enum stops the API server before its
// rules run, and kubectl then prints an extra line about unchecked rules.
//
// +kubebuilder:validation:XValidation:rule="self.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist']",messageExpression="'unsupported value \"' + self.operator + '\": must be one of In, NotIn, Exists, DoesNotExist'",fieldPath=".operator",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!(self.operator in ['In', 'NotIn', 'Exists', 'DoesNotExist']) || (self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)",message="must be non-empty for In and NotIn and empty for Exists and DoesNotExist",fieldPath=".values",reason=FieldValueInvalid
type LabelSelectorRequirement struct {
	// Key is the label key the requirement applies to: an optional DNS subdomain prefix and
	// "/", then a name of at most 63 characters.
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:XValidation:rule="!format.qualifiedName().validate(self).hasValue()",messageExpression="'invalid label key \"' + self + '\": a label key is an optional DNS subdomain prefix and \"/\", then a name of at most 63 alphanumerics, \"-\", \"_\" and \".\" that begins and ends with an alphanumeric'",reason=FieldValueInvalid
	// +required
	Key string `json:"key"`

	// Operator relates the key to the values: In, NotIn, Exists or DoesNotExist.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=64
	// +required
	Operator metav1.LabelSelectorOperator `json:"operator"`

	// Values are label values: non-empty for In and NotIn, empty for Exists and DoesNotExist.
	// At most 64, each at most 63 characters.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:XValidation:rule="self.all(v, !format.labelValue().validate(v).hasValue())",messageExpression="'invalid label value \"' + self.filter(v, format.labelValue().validate(v).hasValue())[0] + '\": a label value is empty or at most 63 alphanumerics, \"-\", \"_\" and \".\" that begins and ends with an alphanumeric'",reason=FieldValueInvalid
	// +listType=atomic
	// +optional
	Values []string `json:"values,omitempty"`
}

// Meta returns s as a metav1.LabelSelector (nil for nil).
func (s *LabelSelector) Meta() *metav1.LabelSelector {
	if s == nil {
		return nil
	}
	m := &metav1.LabelSelector{}
	if s.MatchLabels != nil {
		m.MatchLabels = make(map[string]string, len(s.MatchLabels))
		for k, v := range s.MatchLabels {
			m.MatchLabels[k] = string(v)
		}
	}
	for _, r := range s.MatchExpressions {
		m.MatchExpressions = append(m.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: r.Key, Operator: r.Operator, Values: append([]string(nil), r.Values...)})
	}
	return m
}

// AsSelector parses s as metav1.LabelSelectorAsSelector parses the same selector: a nil
// selector matches nothing, an invalid one is an error.
func (s *LabelSelector) AsSelector() (labels.Selector, error) {
	return metav1.LabelSelectorAsSelector(s.Meta())
}

// MatchLabels returns the selector of the pods that carry every label of m.
func MatchLabels(m map[string]string) *LabelSelector {
	s := &LabelSelector{MatchLabels: make(map[string]LabelValue, len(m))}
	for k, v := range m {
		s.MatchLabels[k] = LabelValue(v)
	}
	return s
}
