package controllers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Review of fenced slots (issue 22) on a real API server and etcd.

// TestReview22RoutingWhileSlotsRetire: a lock of two slots (db-0 in slot 0, db-1 in slot 1)
// is edited to one slot with spec.routing in one update, which the CRD admits (slots is 1).
// Slot 0's term is Held by db-0 throughout, so once slot 1 has ended and left status.slots
// the Service must route to db-0. Each slot's turn syncs the one EndpointSlice to its own
// view: slot 1's (Releasing, then removed) empties what slot 0's turn listed, in every
// reconcile, and the last turn is slot 1's.
func TestReview22RoutingWhileSlotsRetire(t *testing.T) {
	f := newFixture(t)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: f.ns}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "pg", Port: 5432}},
	}}
	if err := k8s.Create(bg(), svc); err != nil {
		t.Fatalf("create Service: %v", err)
	}
	f.podWithIP("db-0", "db", "10.1.0.10")
	secondApart()
	f.podWithIP("db-1", "db", "10.1.0.11")
	f.lock("db", "db", func(s *lockv1.DistributedLockSpec) { s.Slots = 2; s.LockDelaySeconds = ptrTo[int32](3) })
	before := f.waitFor("db", 30*time.Second, "2 slots held", slotsHeld(2))
	if h := before.Status.Holder; h != "db-0" {
		t.Fatalf("slot 0 held by %s, want db-0", h)
	}

	ctx, cancel := context.WithCancel(bg())
	t.Cleanup(cancel)
	log := f.recordRoutes(ctx, "db")
	edited := time.Now()
	f.editLock("db", func(l *lockv1.DistributedLock) {
		l.Spec.Slots = 1
		l.Spec.Routing = &lockv1.Routing{Service: "db"}
	})
	gone := f.waitFor("db", 20*time.Second, "slot 1 removed", func(l *lockv1.DistributedLock) bool { return len(l.Status.Slots) == 0 })
	if gone.Status.Holder != "db-0" || gone.Status.Phase != lockv1.PhaseHeld || gone.Status.FencingToken != before.Status.FencingToken {
		t.Fatalf("slot 0 after the shrink: %s, want db-0 Held with token %d", describeSlots(gone), before.Status.FencingToken)
	}
	eventually(t, 10*time.Second, func() bool { return fmt.Sprint(slicePods(f.routedSlice("db"))) == "[db-0]" },
		func() string {
			return fmt.Sprintf("EndpointSlice lists %v, want [db-0]: db-0 holds the lock's one slot, Held, with routing set; lock %s",
				slicePods(f.routedSlice("db")), describeSlots(f.get("db")))
		})
	removed := time.Since(edited)
	time.Sleep(time.Second) // let the watch deliver the last slice events
	cancel()
	log.mu.Lock()
	var switches []string
	last := ""
	for _, e := range log.events {
		if e.slice == nil {
			continue
		}
		now := "none"
		if pods := slicePods(e.slice); !e.gone && len(pods) > 0 {
			now = fmt.Sprint(pods)
		}
		if now != last {
			switches = append(switches, now)
			last = now
		}
	}
	log.mu.Unlock()
	t.Logf("slot 1 removed %v after the edit; EndpointSlice switches %v", removed.Round(time.Millisecond), switches)
	if len(switches) > 0 && switches[0] == "none" {
		switches = switches[1:] // created empty before the first listing
	}
	if fmt.Sprint(switches) != "[[db-0]]" {
		t.Errorf("EndpointSlice switches after routing was set = %v, want [[db-0]]: db-0 held slot 0 throughout; slot 1's turns unrouted it", switches)
	}
}

// TestReview22SlotHolderReleasesItsSlot: the holder of slot 1 confirms its own release with
// its pod-bound token, naming its slot's term ("<uid>/<token>"), as the one-slot rules let the
// holder of slot 0 do (issue 22: the holder-confirmed release applies per slot). The shipped
// admission policy (config/policy) recognises only status.holderUID and status.fencingToken,
// so it refuses the release of every slot but slot 0.
func TestReview22SlotHolderReleasesItsSlot(t *testing.T) {
	f := newFixture(t)
	f.releaseSetup()
	clients := map[string]client.Client{}
	for i := range 3 {
		p, c := f.workerPod(fmt.Sprintf("a-%d", i), "a")
		clients[p.Name] = c
		secondApart()
	}
	l := f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.Slots = 2; s.LockDelaySeconds = ptrTo[int32](30) })
	held := f.waitFor("lock", 30*time.Second, "2 slots held", slotsHeld(2))
	s1 := held.Status.SlotView(1)
	if err := setAnnotation(clients[s1.Holder], l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(s1.HolderUID, s1.FencingToken)); err != nil {
		t.Fatalf("slot 1's holder %s releasing its own term (token %d) with its pod-bound token: refused: %v", s1.Holder, s1.FencingToken, err)
	}
	next := f.waitFor("lock", 10*time.Second, "slot 1 handed over before the lock delay", func(l *lockv1.DistributedLock) bool {
		v := l.Status.SlotView(1)
		return v.Phase == lockv1.PhaseHeld && v.HolderUID != s1.HolderUID
	})
	if v := next.Status.SlotView(1); len(v.History) < 2 || v.History[1].Reason != lockv1.ReasonHolderReleased {
		t.Errorf("slot 1 history = %+v, want %s's term ended HolderReleased", v.History, s1.Holder)
	}
	if next.Status.FencingToken != held.Status.FencingToken {
		t.Errorf("slot 0 token %d, want %d kept", next.Status.FencingToken, held.Status.FencingToken)
	}
}

// TestReview22EtcdOutageFlipsSlotCondition: TestEtcdOutageFlipsCondition on a lock of two
// slots. reconcileSlots lists the slot keys (Engine.LockKeys) before any slot's turn and
// returns that error as is, so no turn runs etcdDown: EtcdAvailable never goes False on a
// lock with slots, and the outage is seen only in the logs.
func TestReview22EtcdOutageFlipsSlotCondition(t *testing.T) {
	f := newFixture(t)
	f.stop()
	f.stop = f.startController("replica-long", outageElectionTTL)
	f.pod("a-0", "a")
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.Slots = 2 })
	first := f.waitFor("lock", 30*time.Second, "2 slots held, counted", func(l *lockv1.DistributedLock) bool {
		return slotsHeld(2)(l) && l.Status.SlotsHeld == "2/2" && l.Status.EligibleCandidates == 2
	})

	down, _ := f.etcdOutage("lock")
	for _, c := range down.Status.Conditions {
		t.Logf("slot 0 condition %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	}
	if down.Status.Holder != first.Status.Holder || down.Status.FencingToken != first.Status.FencingToken {
		t.Errorf("during outage: %s; want slot 0 kept", describeSlots(down))
	}
}

// TestReview22CandidateChurnIsDebouncedAcrossSlots: TestReviewCandidateChurnIsDebounced on a
// lock of three slots, all held. eligibleCandidates is one field of the lock ("debounced:
// never causes more than one write per 10 s"), but the debounce is kept per slot key, so each
// slot's turn whose own key has not written the count yet writes it: up to one write per slot
// per 10 s.
func TestReview22CandidateChurnIsDebouncedAcrossSlots(t *testing.T) {
	f := newFixture(t)
	for i := range 3 {
		f.pod(fmt.Sprintf("a-%d", i), "a")
		secondApart()
	}
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.Slots = 3 })
	f.waitFor("lock", 30*time.Second, "3 slots held, counted", func(l *lockv1.DistributedLock) bool {
		return slotsHeld(3)(l) && l.Status.SlotsHeld == "3/3" && l.Status.EligibleCandidates == 3
	})
	time.Sleep(time.Second) // let the grants' writes settle
	const n = 4
	writes := f.writesWhileCreating(3, n, describeSlots)
	if len(writes) > 1 {
		t.Errorf("%d status writes of a lock with every slot held while %d candidate pods were created, want at most 1 (CountDebounce 10s):\n%s",
			len(writes), n, joinLines(writes))
	}
}
