package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Token regression of Global locks (DESIGN.md's rule; decideGlobal's tokenRegression): the
// locks whose shared etcd is behind their published token, for /readyz, an Event and a log
// line when a lock enters it.

// noteRegression records whether step is a token-regression step of the lock at key (its
// reason TokenRegression): entering it emits a Warning Event and counts in Healthy; any
// other step clears it.
func (r *GlobalReconciler) noteRegression(ctx context.Context, lock *lockv1.DistributedLock, key string, step globalStep) {
	r.mu.Lock()
	_, known := r.regressed[key]
	if step.reason == lockv1.ReasonTokenRegression {
		if r.regressed == nil {
			r.regressed = map[string]string{}
		}
		r.regressed[key] = step.why
	} else {
		delete(r.regressed, key)
	}
	r.mu.Unlock()
	if step.reason == lockv1.ReasonTokenRegression && !known {
		log.FromContext(ctx).Info("token regression", "lock", key, "why", step.why)
		r.Recorder.Eventf(lock, nil, corev1.EventTypeWarning, lockv1.ReasonTokenRegression, "Refuse", "%s; granting nothing until the shared etcd is restored with --bump-revision", step.why)
	}
}

// forget drops what this process remembers of a deleted lock.
func (r *GlobalReconciler) forget(key string) {
	r.mem.forget(key)
	r.mu.Lock()
	delete(r.regressed, key)
	r.mu.Unlock()
}

// Healthy reports whether every Global lock is free of token regression, for /readyz.
func (r *GlobalReconciler) Healthy() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, why := range r.regressed {
		return fmt.Errorf("token regression on Global lock %s (and %d more): %s", key, len(r.regressed)-1, why)
	}
	return nil
}
