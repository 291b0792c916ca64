package controllers_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
)

// routeLog records, in the API server's order (resourceVersion: one etcd serves both kinds
// here), every lock status and every EndpointSlice the test's watches see.
type routeLog struct {
	mu     sync.Mutex
	events []routeEvent
}

type routeEvent struct {
	rv    int64
	lock  *lockv1.DistributedLock // one of lock and slice is set
	slice *discoveryv1.EndpointSlice
	gone  bool // the slice was deleted
}

func (f *fixture) recordRoutes(ctx context.Context, lock string) *routeLog {
	f.t.Helper()
	log := &routeLog{}
	start := func(list client.ObjectList, opts ...client.ListOption) watch.Interface {
		w, err := k8s.Watch(ctx, list, append(opts, client.InNamespace(f.ns))...)
		if err != nil {
			f.t.Fatalf("watch: %v", err)
		}
		return w
	}
	lw := start(&lockv1.DistributedLockList{})
	sw := start(&discoveryv1.EndpointSliceList{}, client.MatchingLabels{discoveryv1.LabelManagedBy: controllers.RoutingManagedBy})
	var wg sync.WaitGroup
	consume := func(w watch.Interface) {
		defer wg.Done()
		for ev := range w.ResultChan() {
			obj, ok := ev.Object.(client.Object)
			if !ok {
				continue
			}
			rv, _ := strconv.ParseInt(obj.GetResourceVersion(), 10, 64)
			e := routeEvent{rv: rv}
			switch o := obj.(type) {
			case *lockv1.DistributedLock:
				if o.Name != lock {
					continue
				}
				e.lock = o
			case *discoveryv1.EndpointSlice:
				e.slice, e.gone = o, ev.Type == watch.Deleted
			}
			log.mu.Lock()
			log.events = append(log.events, e)
			log.mu.Unlock()
		}
	}
	wg.Add(2)
	go consume(lw)
	go consume(sw)
	f.t.Cleanup(func() { lw.Stop(); sw.Stop(); wg.Wait() })
	return log
}

// lastSliceLists says whether the newest slice event lists exactly pods (none: an empty or
// deleted slice).
func (l *routeLog) lastSliceLists(pods ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.events) - 1; i >= 0; i-- {
		if e := l.events[i]; e.slice != nil {
			var listed []string
			if !e.gone {
				listed = slicePods(e.slice)
			}
			return fmt.Sprint(listed) == fmt.Sprint(pods)
		}
	}
	return false
}

// check replays the log in resourceVersion order: every EndpointSlice lists at most one pod,
// and a pod only while the latest lock status before it is Held by that pod; and no lock
// status that is not Held by the listed pod is published while the slice still lists it.
func (l *routeLog) check(t *testing.T) (switches []string) {
	t.Helper()
	l.mu.Lock()
	evs := append([]routeEvent(nil), l.events...)
	l.mu.Unlock()
	slicesSort(evs)
	var st *lockv1.DistributedLockStatus
	var listed []discoveryv1.Endpoint // what the newest slice event lists
	last := "-"
	for _, e := range evs {
		if e.lock != nil {
			st = &e.lock.Status
			for _, ep := range listed {
				if st.Phase != lockv1.PhaseHeld || ep.TargetRef.UID != st.HolderUID {
					t.Errorf("rv %d: the lock became %s while the EndpointSlice still listed %s", e.rv, describeStatus(st), ep.TargetRef.Name)
				}
			}
			continue
		}
		listed = nil
		if !e.gone {
			listed = e.slice.Endpoints
		}
		var pods []string
		if !e.gone {
			for _, ep := range e.slice.Endpoints {
				pods = append(pods, ep.TargetRef.Name)
				if st == nil || st.Phase != lockv1.PhaseHeld || ep.TargetRef.UID != st.HolderUID {
					t.Errorf("rv %d: EndpointSlice lists %s while the lock is %s", e.rv, ep.TargetRef.Name, describeStatus(st))
				}
			}
		}
		if len(pods) > 1 {
			t.Errorf("rv %d: EndpointSlice lists %d pods: %v", e.rv, len(pods), pods)
		}
		now := "none"
		if len(pods) == 1 {
			now = pods[0]
		}
		if now != last {
			switches = append(switches, now)
			last = now
		}
	}
	return switches
}

func describeStatus(st *lockv1.DistributedLockStatus) string {
	if st == nil {
		return "not seen yet"
	}
	return fmt.Sprintf("%s (holder %s, token %d)", phaseName(st.Phase), st.Holder, st.FencingToken)
}

func phaseName(p lockv1.Phase) string {
	if p == "" {
		return "Pending"
	}
	return string(p)
}

func slicesSort(evs []routeEvent) {
	for i := 1; i < len(evs); i++ { // insertion sort: the two streams are each in order
		for j := i; j > 0 && evs[j].rv < evs[j-1].rv; j-- {
			evs[j], evs[j-1] = evs[j-1], evs[j]
		}
	}
}

// podWithIP creates a Ready candidate with a pod IP and a named container port.
func (f *fixture) podWithIP(name, app, ip string) *corev1.Pod {
	f.t.Helper()
	p := f.pod(name, app)
	f.updatePodStatus(p, func(p *corev1.Pod) { p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}} })
	return p
}

// routedSlice reads the lock's EndpointSlice for service, nil when absent.
func (f *fixture) routedSlice(service string) *discoveryv1.EndpointSlice {
	f.t.Helper()
	var s discoveryv1.EndpointSlice
	if err := k8s.Get(bg(), objectKey(f.ns, service+"-lockwarden"), &s); err != nil {
		return nil
	}
	return &s
}

func slicePods(s *discoveryv1.EndpointSlice) []string {
	var out []string
	if s == nil {
		return nil
	}
	for _, ep := range s.Endpoints {
		out = append(out, ep.TargetRef.Name)
	}
	return out
}

// TestRoutingFollowsTheHolder: a selector-less Service routed by a lock lists exactly the
// holder; across an attested handoff and a Releasing wait, no EndpointSlice event lists two
// pods or a pod the published status does not hold, and none while Releasing.
func TestRoutingFollowsTheHolder(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(bg())
	t.Cleanup(cancel)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: f.ns}, Spec: corev1.ServiceSpec{
		Ports: []corev1.ServicePort{{Name: "pg", Port: 5432}},
	}}
	if err := k8s.Create(bg(), svc); err != nil {
		t.Fatalf("create Service: %v", err)
	}
	log := f.recordRoutes(ctx, "db")
	a0 := f.podWithIP("db-0", "db", "10.1.0.10")
	secondApart()
	a1 := f.podWithIP("db-1", "db", "10.1.0.11")
	f.lock("db", "db", func(s *lockv1.DistributedLockSpec) { s.Routing = &lockv1.Routing{Service: "db"} })
	f.waitFor("db", 20*time.Second, "held by db-0", heldBy("db-0"))
	eventually(t, 10*time.Second, func() bool { return fmt.Sprint(slicePods(f.routedSlice("db"))) == "[db-0]" },
		func() string {
			return fmt.Sprintf("EndpointSlice lists %v, want [db-0]", slicePods(f.routedSlice("db")))
		})
	s := f.routedSlice("db")
	if s.Labels[discoveryv1.LabelServiceName] != "db" || s.Labels[discoveryv1.LabelManagedBy] != controllers.RoutingManagedBy ||
		*s.Endpoints[0].Conditions.Ready != true || s.Endpoints[0].Addresses[0] != "10.1.0.10" || *s.Ports[0].Port != 5432 {
		t.Errorf("EndpointSlice = %+v, want the Service's labels, db-0's IP and port 5432", s)
	}

	// attested handoff: db-0 stops; db-1 is granted at once and routed
	f.terminate(a0)
	f.waitFor("db", 20*time.Second, "held by db-1", heldBy("db-1"))
	eventually(t, 10*time.Second, func() bool { return fmt.Sprint(slicePods(f.routedSlice("db"))) == "[db-1]" },
		func() string {
			return fmt.Sprintf("EndpointSlice lists %v, want [db-1]", slicePods(f.routedSlice("db")))
		})

	// not attested: db-1 turns NotReady; Releasing for the lock delay lists nobody
	f.podWithIP("db-2", "db", "10.1.0.12")
	f.setReady(a1, false)
	f.waitFor("db", 20*time.Second, "Releasing", inPhase(lockv1.PhaseReleasing))
	f.waitFor("db", 30*time.Second, "held by db-2", heldBy("db-2"))
	eventually(t, 10*time.Second, func() bool { return fmt.Sprint(slicePods(f.routedSlice("db"))) == "[db-2]" },
		func() string {
			return fmt.Sprintf("EndpointSlice lists %v, want [db-2]", slicePods(f.routedSlice("db")))
		})

	eventually(t, 5*time.Second, func() bool { return log.lastSliceLists("db-2") }, func() string { return "the watch saw no slice listing db-2" })
	cancel()
	switches := log.check(t)
	if len(switches) > 0 && switches[0] == "none" {
		switches = switches[1:] // the slice may be created empty before the first grant
	}
	if want := "[db-0 none db-1 none db-2]"; fmt.Sprint(switches) != want {
		t.Errorf("EndpointSlice switches = %v, want %s", switches, want)
	}
	t.Logf("EndpointSlice switches: %v", switches)
	f.waitEvents(t, lockv1.ReasonRouted, "Normal", 3)
	f.waitEvents(t, lockv1.ReasonUnrouted, "Normal", 2)
	// A write right after this replica's own (the cache not showing it yet) must not fail:
	// before, it conflicted and was reported as RoutingFailed (seen in the playground).
	var evs eventsv1.EventList
	if err := k8s.List(bg(), &evs, client.InNamespace(f.ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == lockv1.ReasonRoutingFailed {
			t.Errorf("Warning %s: %s", e.Reason, e.Note)
		}
	}
}

// TestRoutingRefusesAServiceWithASelector: Kubernetes manages such a Service's endpoints, so
// the controller lists nothing for it and says why in a Warning Event; the lock is granted
// as usual.
func TestRoutingRefusesAServiceWithASelector(t *testing.T) {
	f := newFixture(t)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "web"}, Ports: []corev1.ServicePort{{Port: 80}},
	}}
	if err := k8s.Create(bg(), svc); err != nil {
		t.Fatalf("create Service: %v", err)
	}
	f.podWithIP("web-0", "web", "10.1.0.20")
	f.lock("web", "web", func(s *lockv1.DistributedLockSpec) { s.Routing = &lockv1.Routing{Service: "web"} })
	f.waitFor("web", 20*time.Second, "held by web-0", heldBy("web-0"))
	f.waitEvents(t, lockv1.ReasonRoutingFailed, "Warning", 1)
	if s := f.routedSlice("web"); s != nil {
		t.Errorf("EndpointSlice %s exists for a Service with a selector: %v", s.Name, slicePods(s))
	}
}

// waitEvents waits for at least n Events of the reason and type about the fixture's locks.
func (f *fixture) waitEvents(t *testing.T, reason, typ string, n int) {
	t.Helper()
	var evs eventsv1.EventList
	count := 0
	eventually(t, 10*time.Second, func() bool {
		if err := k8s.List(bg(), &evs, client.InNamespace(f.ns)); err != nil {
			t.Fatalf("list events: %v", err)
		}
		count = 0
		for _, e := range evs.Items {
			if e.Reason == reason && e.Type == typ && e.Regarding.Kind == "DistributedLock" {
				count++
			}
		}
		return count >= n
	}, func() string {
		return fmt.Sprintf("%d %s Events with reason %s, want at least %d", count, typ, reason, n)
	})
}
