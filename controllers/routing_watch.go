package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// watchRouting wakes a routed lock when its Service changes (created, ports changed, a
// selector added) and when someone else deletes or edits the EndpointSlice it manages (its
// own writes need no turn: the turn that wrote them is the one that decided them).
func (r *Reconciler) watchRouting(c controller.Controller, cache cache.Cache) error {
	if err := c.Watch(source.Kind(cache, &corev1.Service{}, handler.TypedEnqueueRequestsFromMapFunc(r.serviceToLocks))); err != nil {
		return err
	}
	return c.Watch(source.Kind(cache, &discoveryv1.EndpointSlice{}, handler.TypedEnqueueRequestsFromMapFunc(sliceToLock),
		predicate.TypedFuncs[*discoveryv1.EndpointSlice]{
			CreateFunc: func(event.TypedCreateEvent[*discoveryv1.EndpointSlice]) bool { return false },
			UpdateFunc: func(e event.TypedUpdateEvent[*discoveryv1.EndpointSlice]) bool {
				return e.ObjectNew.Labels[discoveryv1.LabelManagedBy] != RoutingManagedBy // taken over
			},
		}))
}

// serviceToLocks maps a Service to the locks of its namespace that route it.
func (r *Reconciler) serviceToLocks(ctx context.Context, svc *corev1.Service) []reconcile.Request {
	var list lockv1.DistributedLockList
	if err := r.Client.List(ctx, &list, client.InNamespace(svc.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if rt := list.Items[i].Spec.Routing; rt != nil && rt.Service == svc.Name {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

// sliceToLock maps a managed EndpointSlice to the lock its label names.
func sliceToLock(_ context.Context, s *discoveryv1.EndpointSlice) []reconcile.Request {
	name := s.Labels[RoutingLockLabel]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: s.Namespace, Name: name}}}
}
