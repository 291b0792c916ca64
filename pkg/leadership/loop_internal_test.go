package leadership

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestAcceptOrdersObservations checks each ordering rule on its own: after a first observation
// is accepted, a second is accepted or dropped.
func TestAcceptOrdersObservations(t *testing.T) {
	obs := func(uid types.UID, rv string, phase lockv1.Phase, token, maxToken int64) *lockv1.DistributedLock {
		return &lockv1.DistributedLock{
			ObjectMeta: metav1.ObjectMeta{UID: uid, ResourceVersion: rv},
			Status:     lockv1.DistributedLockStatus{Phase: phase, FencingToken: token, MaxFencingToken: maxToken},
		}
	}
	const held, releasing = lockv1.PhaseHeld, lockv1.PhaseReleasing
	tests := []struct {
		name          string
		first, second *lockv1.DistributedLock
		want          bool
	}{
		{"newer resourceVersion", obs("l1", "100", held, 5, 5), obs("l1", "101", releasing, 5, 5), true},
		{"same resourceVersion (a read confirming what a watch showed)", obs("l1", "100", held, 5, 5), obs("l1", "100", held, 5, 5), true},
		{"older resourceVersion, same token", obs("l1", "100", held, 5, 5), obs("l1", "99", releasing, 5, 5), false},
		{"older resourceVersion, higher token", obs("l1", "100", held, 5, 5), obs("l1", "99", held, 7, 7), false},
		{"newer resourceVersion, lower maxFencingToken", obs("l1", "100", held, 5, 5), obs("l1", "101", releasing, 4, 4), false},
		{"newer resourceVersion, Held below the highest token", obs("l1", "100", releasing, 0, 6), obs("l1", "101", held, 5, 6), false},
		{"Pending keeps the max, token cleared", obs("l1", "100", held, 5, 5), obs("l1", "101", lockv1.PhasePending, 0, 5), true},
		{"lock re-created: tokens start over", obs("l1", "100", held, 50, 50), obs("l2", "200", held, 3, 3), true},
		{"re-created lock, older resourceVersion", obs("l1", "100", held, 50, 50), obs("l2", "90", held, 60, 60), false},
		{"unparsable resourceVersion: token order only, newer", obs("l1", "a", held, 5, 5), obs("l1", "b", held, 6, 6), true},
		{"unparsable resourceVersion: token order only, older", obs("l1", "b", held, 6, 6), obs("l1", "a", held, 5, 5), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var l loop
			if !l.accept(tt.first) {
				t.Fatalf("accept(first) = false, want true")
			}
			if got := l.accept(tt.second); got != tt.want {
				t.Errorf("accept(second) = %v, want %v", got, tt.want)
			}
		})
	}
}
