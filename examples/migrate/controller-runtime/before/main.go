// Command stamper is an operator with one reconciler: it stamps every ConfigMap labelled
// example.com/stamp=true with the name of the pod that reconciled it. Its manager runs the
// reconciler while it holds the Lease "configmap-stamper" (LeaderElection: true).
//
// Environment: POD_NAME and POD_NAMESPACE (downward API); kubeconfig or in-cluster config.
// This is the before-program of docs/migration.md.
package main

import (
	"context"
	"fmt"
	"os"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
)

const (
	lockName = "configmap-stamper"

	stampLabel       = "example.com/stamp"
	writerAnnotation = "example.com/reconciled-by"
)

func main() {
	ctrl.SetLogger(zap.New())
	log := ctrl.Log.WithName("setup")
	ns, name := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")

	cfg := ctrl.GetConfigOrDie()
	ctx := ctrl.SetupSignalHandler()
	mgr, err := newManager(cfg, ns, name)
	if err == nil {
		// Start returns "leader election lost" when the Lease could not be renewed; the
		// process exits and the kubelet restarts the container, which campaigns again.
		err = mgr.Start(ctx)
	}
	if err != nil {
		log.Error(err, "run manager")
		os.Exit(1)
	}
}

// newManager builds the manager and its one controller.
func newManager(cfg *rest.Config, ns, name string) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		HealthProbeBindAddress: ":8081",

		LeaderElection:                true,
		LeaderElectionID:              lockName,
		LeaderElectionNamespace:       ns,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	stampable := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[stampLabel] == "true" })
	err = ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}, builder.WithPredicates(stampable)).
		Complete(&stamper{Client: mgr.GetClient(), writer: name})
	if err != nil {
		return nil, fmt.Errorf("create controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("add healthz check: %w", err)
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("add readyz check: %w", err)
	}
	return mgr, nil
}

// stamper stamps a ConfigMap with the pod that reconciled it. It runs only on the leader.
type stamper struct {
	client.Client
	writer string
}

// Reconcile stamps one ConfigMap.
func (r *stamper) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cm corev1.ConfigMap
	if err := r.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cm.Annotations[writerAnnotation] == r.writer {
		return ctrl.Result{}, nil
	}
	// The optimistic lock sends the resourceVersion read: a concurrent write makes it fail.
	patch := client.MergeFromWithOptions(cm.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[writerAnnotation] = r.writer
	if err := r.Patch(ctx, &cm, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("patch configmap %s: %w", req.NamespacedName, err)
	}
	return ctrl.Result{}, nil
}
