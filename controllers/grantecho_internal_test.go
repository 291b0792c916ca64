package controllers

import (
	"testing"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// Only the echo of this replica's own grant (the put that created the key at the grant's
// token) goes without a turn, whether the watch shows it before or after the grant's answer;
// every other change of the key wakes the lock, at the latest when the grant in flight
// answers.
func TestWakeChangeSkipsOnlyOwnGrantEcho(t *testing.T) {
	echo := lease.LockChange{Key: "ns/a", Revision: 10, Token: 10}
	for _, tc := range []struct {
		name    string
		before  []lease.LockChange // seen while the grant of ns/a is in flight
		answer  int64              // the grant's token; 0: failed or unknown
		after   []lease.LockChange // seen after the answer
		granted bool               // a grant of ns/a was sent at all
		wakes   int
	}{
		{name: "echo after the answer", granted: true, answer: 10, after: []lease.LockChange{echo}, wakes: 0},
		{name: "echo before the answer", granted: true, before: []lease.LockChange{echo}, answer: 10, wakes: 0},
		{name: "no grant of ours", after: []lease.LockChange{echo}, wakes: 1},
		{name: "failed grant, same-looking put", granted: true, before: []lease.LockChange{echo}, answer: 0, wakes: 1},
		{name: "another lock", granted: true, answer: 10, after: []lease.LockChange{{Key: "ns/b", Revision: 10, Token: 10}}, wakes: 1},
		{name: "record update", granted: true, answer: 10, after: []lease.LockChange{echo, {Key: "ns/a", Revision: 12, Token: 10}}, wakes: 1},
		{name: "delete while in flight", granted: true, before: []lease.LockChange{echo, {Key: "ns/a", Revision: 12, Deleted: true}}, answer: 10, wakes: 1},
		{name: "someone else's grant", granted: true, answer: 10, after: []lease.LockChange{{Key: "ns/a", Revision: 14, Token: 14}}, wakes: 1},
		{name: "the echo twice (a replayed watch)", granted: true, answer: 10, after: []lease.LockChange{echo, echo}, wakes: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer q.ShutDown()
			r := &Reconciler{queue: q}
			wakes := func() int { // the queue holds a lock once however often it is added
				n := q.Len()
				for range n {
					item, _ := q.Get()
					q.Done(item)
				}
				return n
			}
			got := 0
			if tc.granted {
				r.grantSent("ns/a")
			}
			for _, c := range tc.before {
				r.wakeChange(c)
				got += wakes()
			}
			if tc.granted {
				r.grantAnswered("ns/a", tc.answer)
			}
			got += wakes()
			for _, c := range tc.after {
				r.wakeChange(c)
				got += wakes()
			}
			if got != tc.wakes {
				t.Fatalf("lock woken %d times, want %d", got, tc.wakes)
			}
		})
	}
}
