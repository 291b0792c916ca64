package controllers_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestInvalidLabelKeyNamedInOneLine: a selector with an invalid label key (which the API
// server's rules cannot afford to check) shows up as Valid=False InvalidSelector with one line
// that names spec.candidates.selector and the key (issue 15 item 6); before, the message was
// the label parser's multi-line error that never said "selector".
func TestInvalidLabelKeyNamedInOneLine(t *testing.T) {
	f := newFixture(t)
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) {
		s.Candidates.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app name": "x"}}
	})
	var msg string
	f.waitFor("lock", 20*time.Second, "Valid=False InvalidSelector", func(l *lockv1.DistributedLock) bool {
		c := meta.FindStatusCondition(l.Status.Conditions, lockv1.ConditionValid)
		if c == nil || c.Reason != lockv1.ReasonInvalidSelector {
			return false
		}
		msg = c.Message
		return true
	})
	if want := `spec.candidates.selector.matchLabels: invalid label key "app name"`; !strings.Contains(msg, want) || strings.Contains(msg, "\n") {
		t.Errorf("Valid message = %q, want one line containing %q", msg, want)
	}
}
