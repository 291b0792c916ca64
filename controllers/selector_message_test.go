package controllers_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestInvalidLabelKeyNamedInOneLine: a selector with an invalid label key is refused by the
// API server itself (the CRD's bounded selector and CEL rules, issue 25 item 4) with one line
// that names spec.candidates.selector and the key; it never reaches the controller. Before,
// the API server admitted it and only the controller's Valid=False InvalidSelector said so
// (issue 15 item 6); that message (lockv1.SelectorProblem) remains for locks stored before
// the CRD checked keys and values.
func TestInvalidLabelKeyNamedInOneLine(t *testing.T) {
	f := newFixture(t)
	l := &lockv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: "lock", Namespace: f.ns},
		Spec: lockv1.DistributedLockSpec{
			Candidates:           lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"app name": "x"})},
			LeaseDurationSeconds: 2,
		},
	}
	err := k8s.Create(bg(), l)
	if err == nil {
		t.Fatal("create a lock whose selector has the key \"app name\" = accepted, want refused")
	}
	if want := `spec.candidates.selector.matchLabels: Invalid value: invalid label key "app name"`; !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
		t.Errorf("create error = %q, want one line containing %q", err, want)
	}
}
