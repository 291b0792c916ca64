package controllers

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// routeBefore empties the lock's EndpointSlice before a status that does not list the routed
// pod is written (Releasing, Pending, Suspended, another holder), so that no slice event
// shows a pod the published status no longer grants. A failure is reported and does not hold
// the status write back: routing must never delay the end of a term.
func (t *turn) routeBefore(ctx context.Context) {
	if t.lock.Spec.Routing == nil || !t.routes() {
		return
	}
	listed, known := t.r.routes.listed(t.key)
	if !known {
		// This replica has not written the slice yet (a new epoch, a restart): what another
		// replica listed is only known to the API server.
		listed = t.listedNow(ctx)
	}
	if listed == "" || (t.st.Phase == lockv1.PhaseHeld && t.st.HolderUID == listed) {
		return
	}
	t.syncRoute(ctx, &lockv1.DistributedLockStatus{Phase: lockv1.PhaseReleasing})
}

// routes reports whether this turn keeps the lock's EndpointSlice: routing follows slot 0
// alone. The API server admits spec.routing only with one slot, but a lock lowered to one
// slot with routing set in the same edit still ends its other slots: their turns must not
// list or unlist slot 0's holder (review 22).
func (t *turn) routes() bool { return t.slot == nil || t.slot.index == 0 }

// listedNow is the pod UID the lock's EndpointSlice lists, read uncached; "" for none. A
// failed read answers a UID no status holds, so that the slice is emptied.
func (t *turn) listedNow(ctx context.Context) types.UID {
	var s discoveryv1.EndpointSlice
	err := t.uncached().Get(ctx, client.ObjectKey{Namespace: t.lock.Namespace, Name: routingSliceName(t.lock.Spec.Routing.Service)}, &s)
	switch {
	case apierrors.IsNotFound(err):
		return ""
	case err != nil:
		return "unknown"
	}
	switch {
	case len(s.Endpoints) == 0:
		return ""
	case s.Endpoints[0].TargetRef == nil:
		return "unknown"
	}
	return s.Endpoints[0].TargetRef.UID
}

// routeAfter makes the slice list what the status just written (or left as it was) grants.
func (t *turn) routeAfter(ctx context.Context) {
	if !t.routes() {
		return
	}
	if t.lock.Spec.Routing == nil {
		// spec.routing removed: drop what this replica listed, or (first turn of the lock in
		// this replica) what another may have left
		if uid, known := t.r.routes.listed(t.key); uid != "" || !known {
			t.dropRoutes(ctx, "")
		}
		return
	}
	t.syncRoute(ctx, &t.lock.Status)
}

// syncRoute writes the lock's EndpointSlice to list what st grants. A replica whose
// election is no longer valid writes nothing (a deposed replica's cache may show a holder the
// new epoch has ended; a write already sent when the election lapses is not fenced).
func (t *turn) syncRoute(ctx context.Context, st *lockv1.DistributedLockStatus) {
	if !t.r.Election.Valid() {
		return
	}
	svcName := t.lock.Spec.Routing.Service
	var svc *corev1.Service
	var got corev1.Service
	switch err := t.r.Client.Get(ctx, client.ObjectKey{Namespace: t.lock.Namespace, Name: svcName}, &got); {
	case err == nil:
		svc = &got
	case !apierrors.IsNotFound(err):
		t.routingFailed(fmt.Errorf("get Service %s: %w", svcName, err))
		return
	}
	r := desiredRoute(st, svc, t.routeHolder(st))
	if r.problem != "" {
		t.dropRoutes(ctx, "")
		if msg := fmt.Sprintf("spec.routing.service %s: %s", svcName, r.problem); t.r.routes.problem(t.key, msg) {
			t.r.Recorder.Eventf(t.lock, nil, corev1.EventTypeWarning, lockv1.ReasonRoutingFailed, "Route", "%s", msg)
		}
		return
	}
	t.r.routes.problem(t.key, "")
	t.dropRoutes(ctx, svcName) // a slice left from an earlier spec.routing.service
	want := t.routingSlice(svc, r)
	err := t.writeSlice(ctx, t.r.Client, want)
	if (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && t.r.Election.Valid() {
		// the cache had not seen this replica's last write of the slice yet: read it uncached
		// (and only while still elected: a conflict may be the new epoch's write)
		err = t.writeSlice(ctx, t.uncached(), want)
	}
	if err != nil {
		t.routingFailed(fmt.Errorf("write EndpointSlice %s: %w", want.Name, err))
		return
	}
	var uid types.UID
	var name string
	if r.pod != nil {
		uid, name = r.pod.UID, r.pod.Name
	}
	if t.r.routes.set(t.key, uid) {
		if r.pod != nil {
			t.r.Recorder.Eventf(t.lock, r.pod, corev1.EventTypeNormal, lockv1.ReasonRouted, "Route",
				"Service %s routes to %s (%s)", svcName, name, r.pod.Status.PodIP)
		} else {
			t.r.Recorder.Eventf(t.lock, nil, corev1.EventTypeNormal, lockv1.ReasonUnrouted, "Route",
				"Service %s routes to no pod: %s", svcName, r.note)
		}
	}
}

// writeSlice makes the slice want exist with its content, read through reader.
func (t *turn) writeSlice(ctx context.Context, reader client.Reader, want *discoveryv1.EndpointSlice) error {
	var cur discoveryv1.EndpointSlice
	err := reader.Get(ctx, client.ObjectKeyFromObject(want), &cur)
	switch {
	case apierrors.IsNotFound(err):
		err = t.r.Client.Create(ctx, want)
	case err != nil:
	case cur.AddressType != want.AddressType: // immutable
		if err = t.r.Client.Delete(ctx, &cur); err == nil || apierrors.IsNotFound(err) {
			err = t.r.Client.Create(ctx, want)
		}
	case !equality.Semantic.DeepEqual(cur.Endpoints, want.Endpoints) || !equality.Semantic.DeepEqual(cur.Ports, want.Ports) ||
		!equality.Semantic.DeepEqual(cur.Labels, want.Labels):
		cur.Endpoints, cur.Ports, cur.Labels = want.Endpoints, want.Ports, want.Labels
		err = t.r.Client.Update(ctx, &cur)
	}
	return err
}

// uncached is the API reader (the client when none is set, as in unit tests).
func (t *turn) uncached() client.Reader {
	if t.r.APIReader != nil {
		return t.r.APIReader
	}
	return t.r.Client
}

// routingSlice is the EndpointSlice that lists r for svc, owned by the lock.
func (t *turn) routingSlice(svc *corev1.Service, r route) *discoveryv1.EndpointSlice {
	yes := true
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name:      routingSliceName(svc.Name),
			Namespace: svc.Namespace,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: svc.Name,
				discoveryv1.LabelManagedBy:   RoutingManagedBy,
				RoutingLockLabel:             t.lock.Name,
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: lockv1.GroupVersion.String(), Kind: "DistributedLock", Name: t.lock.Name, UID: t.lock.UID,
				Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		AddressType: r.addressType,
		Endpoints:   r.endpoints,
		Ports:       r.ports,
	}
}

// dropRoutes deletes the lock's slices for any Service but keep ("" for all).
func (t *turn) dropRoutes(ctx context.Context, keep string) {
	if !t.r.Election.Valid() {
		return
	}
	var list discoveryv1.EndpointSliceList
	if err := t.r.Client.List(ctx, &list, client.InNamespace(t.lock.Namespace),
		client.MatchingLabels{discoveryv1.LabelManagedBy: RoutingManagedBy, RoutingLockLabel: t.lock.Name}); err != nil {
		t.routingFailed(fmt.Errorf("list EndpointSlices: %w", err))
		return
	}
	for i := range list.Items {
		s := &list.Items[i]
		if keep != "" && s.Labels[discoveryv1.LabelServiceName] == keep {
			continue
		}
		if err := t.r.Client.Delete(ctx, s); err != nil && !apierrors.IsNotFound(err) {
			t.routingFailed(fmt.Errorf("delete EndpointSlice %s: %w", s.Name, err))
			return
		}
	}
	if keep == "" {
		t.r.routes.set(t.key, "")
	}
}

// routeHolder is the pod st names as holder, from this turn's candidates or evidence.
func (t *turn) routeHolder(st *lockv1.DistributedLockStatus) *corev1.Pod {
	if st.HolderUID == "" {
		return nil
	}
	for i := range t.in.pods {
		if t.in.pods[i].UID == st.HolderUID {
			return &t.in.pods[i]
		}
	}
	if p := t.in.holder.pod; p != nil && p.UID == st.HolderUID {
		return p
	}
	return nil
}

// routingFailed reports a failed routing write; the next turn tries again.
func (t *turn) routingFailed(err error) {
	t.r.Recorder.Eventf(t.lock, nil, corev1.EventTypeWarning, lockv1.ReasonRoutingFailed, "Route", "%v", err)
	t.after(routingRetry)
}

// routingRetry is how soon a turn runs again after a failed routing write.
const routingRetry = 5 * time.Second

// routeMemory is what this replica last wrote to each routed lock's EndpointSlice.
type routeMemory struct {
	mu sync.Mutex
	m  map[string]routeState
}

type routeState struct {
	uid     types.UID // the listed pod; "" for none
	problem string    // the last problem reported
}

// listed is the pod UID last listed for key, and whether this replica wrote key's slice yet.
func (m *routeMemory) listed(key string) (types.UID, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.m[key]
	return s.uid, ok
}

// set records uid as listed for key and says whether it changed.
func (m *routeMemory) set(key string, uid types.UID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string]routeState{}
	}
	s, ok := m.m[key]
	m.m[key] = routeState{uid: uid, problem: s.problem}
	return !ok && uid != "" || ok && s.uid != uid
}

// problem records msg as key's routing problem and says whether it is new (to report).
func (m *routeMemory) problem(key, msg string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string]routeState{}
	}
	s := m.m[key]
	changed := s.problem != msg
	s.problem = msg
	m.m[key] = s
	return changed && msg != ""
}

// forget drops key (the lock is gone).
func (m *routeMemory) forget(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, key)
}
