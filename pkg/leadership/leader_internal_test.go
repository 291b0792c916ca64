package leadership

import (
	"testing"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestHeldBy: GetLeader reports a holder only for an observation with phase Held that names
// one.
func TestHeldBy(t *testing.T) {
	tests := []struct {
		name     string
		st       lockv1.DistributedLockStatus
		wantName string // "" means no holder
	}{
		{"held", lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, Holder: "pod-a", HolderUID: "uid-a", FencingToken: 3}, "pod-a"},
		{"releasing", lockv1.DistributedLockStatus{Phase: lockv1.PhaseReleasing, Holder: "pod-a", HolderUID: "uid-a", FencingToken: 3}, ""},
		{"pending", lockv1.DistributedLockStatus{Phase: lockv1.PhasePending}, ""},
		{"suspended", lockv1.DistributedLockStatus{Phase: lockv1.PhaseSuspended, Holder: "pod-a", HolderUID: "uid-a", FencingToken: 3}, ""},
		{"no status", lockv1.DistributedLockStatus{}, ""},
		{"held without holder UID", lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, Holder: "pod-a"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := heldBy(&tt.st)
			switch {
			case tt.wantName == "" && got != nil:
				t.Errorf("heldBy(%+v) = %+v, want nil", tt.st, *got)
			case tt.wantName != "" && (got == nil || got.name != tt.wantName || got.uid != tt.st.HolderUID):
				t.Errorf("heldBy(%+v) = %v, want {%s %s}", tt.st, got, tt.wantName, tt.st.HolderUID)
			}
		})
	}
}
