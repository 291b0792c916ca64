package lease

import (
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The ownership rule (owner.go): the lock key, else nobody during a
// lock-delay, else the oldest queue entry, else nobody.
func TestOwnerRule(t *testing.T) {
	lock := &mvccpb.KeyValue{Key: []byte("P/locks/k"), CreateRevision: 5}
	tomb := &mvccpb.KeyValue{Key: []byte("P/tombstones/k"), CreateRevision: 7}
	oldest := &mvccpb.KeyValue{Key: []byte("P/queue/k/1"), CreateRevision: 6}
	for _, tc := range []struct {
		name string
		st   lockState
		want *mvccpb.KeyValue
	}{
		{"free", lockState{}, nil},
		{"lock key", lockState{lock: lock}, lock},
		{"lock key before waiters", lockState{lock: lock, oldest: oldest}, lock},
		{"lock key and a tombstone (not written by the engine)", lockState{lock: lock, tomb: tomb, oldest: oldest}, lock},
		{"lock-delay", lockState{tomb: tomb}, nil},
		{"lock-delay holds waiters off", lockState{tomb: tomb, oldest: oldest}, nil},
		{"oldest waiter is the grant", lockState{oldest: oldest}, oldest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.st.owner(); got != tc.want {
				t.Fatalf("owner() = %v, want %v", got, tc.want)
			}
		})
	}
}
