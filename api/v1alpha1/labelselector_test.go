package v1alpha1_test

import (
	"encoding/json"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestLabelSelectorJSONIsMetav1: a selector written as metav1.LabelSelector reads back
// unchanged through LabelSelector and the other way round, so manifests need no change.
func TestLabelSelectorJSONIsMetav1(t *testing.T) {
	docs := []string{
		`{"matchLabels":{"app":"web","example.com/tier":""}}`,
		`{"matchExpressions":[{"key":"app","operator":"In","values":["a","b"]},{"key":"x","operator":"Exists"}]}`,
		`{"matchLabels":{"a":"b"},"matchExpressions":[{"key":"c","operator":"NotIn","values":["d"]}]}`,
		`{}`,
	}
	for _, doc := range docs {
		var ours lockv1.LabelSelector
		var theirs metav1.LabelSelector
		if err := json.Unmarshal([]byte(doc), &ours); err != nil {
			t.Fatalf("unmarshal %s into LabelSelector: %v", doc, err)
		}
		if err := json.Unmarshal([]byte(doc), &theirs); err != nil {
			t.Fatalf("unmarshal %s into metav1.LabelSelector: %v", doc, err)
		}
		a, _ := json.Marshal(&ours)
		b, _ := json.Marshal(&theirs)
		if string(a) != string(b) {
			t.Errorf("%s: LabelSelector marshals to %s, metav1.LabelSelector to %s", doc, a, b)
		}
		if got := ours.Meta(); !reflect.DeepEqual(got, &theirs) {
			t.Errorf("%s: Meta() = %+v, want %+v", doc, got, &theirs)
		}
	}
}

// TestAsSelectorMatchesAsMetav1 compares AsSelector with metav1.LabelSelectorAsSelector on
// the same selectors and label sets.
func TestAsSelectorMatchesAsMetav1(t *testing.T) {
	sels := []*lockv1.LabelSelector{
		nil,
		lockv1.MatchLabels(map[string]string{"app": "web"}),
		{MatchExpressions: []lockv1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"db"}}}},
		{MatchLabels: map[string]lockv1.LabelValue{"app": "web"}, MatchExpressions: []lockv1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}}},
	}
	sets := []labels.Set{{}, {"app": "web"}, {"app": "db"}, {"app": "web", "tier": "x"}}
	for _, s := range sels {
		ours, err := s.AsSelector()
		if err != nil {
			t.Fatalf("AsSelector(%+v): %v", s, err)
		}
		theirs, err := metav1.LabelSelectorAsSelector(s.Meta())
		if err != nil {
			t.Fatalf("metav1.LabelSelectorAsSelector(%+v): %v", s.Meta(), err)
		}
		for _, set := range sets {
			if a, b := ours.Matches(set), theirs.Matches(set); a != b {
				t.Errorf("selector %v on %v: AsSelector matches %v, metav1 %v", s.Meta(), set, a, b)
			}
		}
	}
	if _, err := (&lockv1.LabelSelector{MatchExpressions: []lockv1.LabelSelectorRequirement{{Key: "app", Operator: "Near"}}}).AsSelector(); err == nil {
		t.Error("AsSelector with operator Near = nil error, want an error")
	}
}
