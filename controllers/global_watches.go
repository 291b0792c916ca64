package controllers

import (
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/source"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// NewController builds the controller of Global locks without adding it to the manager: it
// runs only while this replica holds the election (Active.lead), beside the in-cluster one.
func (r *GlobalReconciler) NewController(mgr manager.Manager, maxConcurrent int) (controller.Controller, error) {
	c, err := newEpochController(mgr, "globallock", r, maxConcurrent)
	if err != nil {
		return nil, err
	}
	cache := mgr.GetCache()
	if err := c.Watch(source.Kind(cache, &lockv1.DistributedLock{}, &handler.TypedEnqueueRequestForObject[*lockv1.DistributedLock]{},
		globalScopedLocks())); err != nil {
		return nil, err
	}
	return c, nil
}
