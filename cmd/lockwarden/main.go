// Command lockwarden is the manager: it joins the controller election in etcd and, while
// elected, reconciles DistributedLocks. Standbys keep their caches warm and stay Ready.
// Flags are validated before anything touches kubeconfig, etcd or the network; `--help`
// lists them. docs/operations.md describes them in full.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

func main() {
	o, err := parseFlags(os.Args[1:], os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if errors.Is(err, errVersion) {
		printVersion(os.Stdout)
		return
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "lockwarden: %v\n", err)
		os.Exit(2)
	}
	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		fmt.Fprintf(os.Stderr, "lockwarden: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o *options) error {
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	logger := ctrl.Log.WithName("lockwarden")

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := lockv1.AddToScheme(scheme); err != nil {
		return err
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cli, closeEtcd, err := connectEtcd(o)
	if err != nil {
		return err
	}
	defer closeEtcd()
	engine := lease.NewEngine(cli, lease.WithPrefix(o.etcdPrefix))

	mgr, err := ctrl.NewManager(cfg, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress: o.probeAddr,
		PprofBindAddress:       o.pprofAddr,
		LeaderElection:         false, // the election is in etcd (controllers.Active)
		Cache:                  cacheOptions(o.namespaces),
		Client:                 client.Options{Cache: &client.CacheOptions{Unstructured: false}},
	})
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	if len(o.namespaces) > 0 {
		// The finalizer policy must not mark locks this manager never sees (controllers/finalizer_scope.go).
		if err := controllers.CheckFinalizerScope(ctx, mgr.GetAPIReader(), o.namespaces); err != nil {
			return err
		}
	}
	var (
		cluster lease.ClusterID
		global  *lease.Global
	)
	if o.clusterName != "" {
		// Before anything starts: a refused registration (the name is another cluster's)
		// keeps the manager from starting, with the error naming both (finding F3).
		if global, err = lease.NewGlobal(cli, o.globalEtcdPrefix); err != nil {
			return fmt.Errorf("--global-etcd-prefix: %w", err)
		}
		if cluster, err = controllers.RegisterCluster(ctx, mgr.GetAPIReader(), global, o.clusterName, o.etcdPrefix); err != nil {
			return fmt.Errorf("--cluster-name %s: %w", o.clusterName, err)
		}
	}
	active, err := controllers.NewActive(controllers.ActiveConfig{
		Engine:                  engine,
		Manager:                 mgr,
		Identity:                o.identity,
		ElectionTTL:             o.electionTTL,
		GrantTTL:                o.grantTTL,
		MaxConcurrentReconciles: o.maxConcurrent,
		Metrics:                 controllers.NewMetrics(metrics.Registry),
		Cluster:                 cluster,
		Global:                  global,
	})
	if err != nil {
		return err
	}
	if err := active.AddToManager(ctx); err != nil {
		return err
	}
	// Standbys keep their caches warm: start the informers now, not at election.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		for _, obj := range []client.Object{&lockv1.DistributedLock{}, &corev1.Pod{}, &corev1.Node{}} {
			if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
				return fmt.Errorf("warm cache: %w", err)
			}
		}
		<-ctx.Done()
		return nil
	})); err != nil {
		return err
	}
	etcdReady := &etcdCheck{cli: cli, key: engine.Path(controllers.GrantLeaseKey)}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("etcd", func(req *http.Request) error { return etcdReady.check(req.Context()) }); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("tokens", func(*http.Request) error { return active.Healthy() }); err != nil {
		return err
	}
	logger.Info("starting", "identity", o.identity, "etcdPrefix", o.etcdPrefix, "electionTTL", o.electionTTL, "grantLeaseTTL", o.grantTTL,
		"clusterName", o.clusterName, "globalEtcdPrefix", o.globalEtcdPrefix)
	if err := mgr.Start(ctx); err != nil {
		return err
	}
	return nil
}

// cacheOptions strips managedFields from cached objects (they are most of a pod's bytes and
// the controller never reads them), caches only the EndpointSlices the controller manages
// (spec.routing) and, with --watch-namespaces, limits the caches to those namespaces.
func cacheOptions(namespaces []string) cache.Options {
	opts := cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&discoveryv1.EndpointSlice{}: {Label: labels.SelectorFromSet(labels.Set{discoveryv1.LabelManagedBy: controllers.RoutingManagedBy})},
		},
	}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}
