// Command stamper is an operator with one reconciler: it stamps every ConfigMap labelled
// example.com/stamp=true with the name of the pod that reconciled it. Its manager runs the
// reconciler while lockwarden's controller grants this pod the DistributedLock
// "configmap-stamper", and the stamp carries the term's fencing token and this process's
// writer ID: a reconciler whose token is lower than the one on the ConfigMap is refused, and
// so is one with the same token from another process (this pod's previous container, whose
// writes may still arrive), which ends the term for this process.
//
// Environment: POD_UID, POD_NAME and POD_NAMESPACE (downward API); kubeconfig or in-cluster
// config. Flag -recampaign=false exits when the lock is lost, as before. This is the
// after-program of docs/migration.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/lockwarden/lockwarden/pkg/leadership"
	"github.com/lockwarden/lockwarden/pkg/leadership/crmanager"
)

const (
	lockName = "configmap-stamper"

	stampLabel       = "example.com/stamp"
	writerAnnotation = "example.com/reconciled-by"
	tokenAnnotation  = "example.com/fencing-token"
	// fenceAnnotation holds the writer ID (pod UID and an incarnation drawn each time the
	// manager became leader) that first stamped tokenAnnotation's token: under one token only
	// that writer may stamp again.
	fenceAnnotation = "example.com/fencing-writer"
)

// Sentinels of Reconcile.
var (
	errStale       = errors.New("a writer with a newer fencing token stamped the configmap")
	errOtherWriter = errors.New("another process stamped the configmap with this token first")
	errNotLeading  = errors.New("not leading")
)

func main() {
	recampaign := flag.Bool("recampaign", true, "when the lock is lost, build a new manager and campaign again instead of exiting")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	log := ctrl.Log.WithName("setup")
	ns, name := os.Getenv("POD_NAMESPACE"), os.Getenv("POD_NAME")

	cfg := ctrl.GetConfigOrDie()
	ctx := ctrl.SetupSignalHandler()
	// crmanager.Options makes the lock, which follows the DistributedLock (Identity defaults
	// to $POD_UID, Name to $POD_NAME), and gives it and the manager one set of leader election
	// timings (controller-runtime's defaults here): the lock keeps the manager within its
	// term's validity only by knowing them exactly.
	opts, lock, err := crmanager.Options(leadership.ResourceLockConfig{
		Config:    cfg,
		Namespace: ns,
		Lock:      lockName,
		// Replaces LeaderElectionReleaseOnCancel: RunManager confirms the end of the term
		// once the manager has stopped every controller (crmanager.Options sets
		// ReleaseOnStop for the manager's 30 s GracefulShutdownTimeout; DisableReleaseOnStop
		// turns it off).
		Log: ctrl.Log.WithName("leadership"),
	}, ctrl.Options{
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		HealthProbeBindAddress: ":8081",
		// With a lock of its own the manager ignores LeaderElectionNamespace; the ID only
		// names the election in logs and in leader_election_master_status{name}.
		LeaderElectionID: lockName,
	})
	if err != nil {
		log.Error(err, "create lock")
		os.Exit(1)
	}
	if *recampaign {
		// A manager that loses the lock is stopped; RunManager builds a new one at once, which
		// campaigns again and leads no sooner than the lost term's validity has passed.
		err = leadership.RunManager(ctx, lock, func() (leadership.Manager, error) { return newManager(cfg, opts, name, lock) })
	} else {
		var mgr ctrl.Manager
		mgr, err = newManager(cfg, opts, name, lock)
		if err == nil {
			// Start returns "leader election lost" when the lock is lost; the process exits
			// and the kubelet restarts the container, which campaigns again.
			err = mgr.Start(ctx)
		}
	}
	if err != nil {
		log.Error(err, "run manager")
		os.Exit(1)
	}
}

// newManager builds a manager from opts (which elect with lock) and its one controller.
func newManager(cfg *rest.Config, opts ctrl.Options, name string, lock *leadership.ResourceLock) (ctrl.Manager, error) {
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	stampable := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetLabels()[stampLabel] == "true" })
	err = ctrl.NewControllerManagedBy(mgr).
		For(&corev1.ConfigMap{}, builder.WithPredicates(stampable)).
		Complete(&stamper{Client: mgr.GetClient(), writer: name, lock: lock})
	if err != nil {
		return nil, fmt.Errorf("create controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, fmt.Errorf("add healthz check: %w", err)
	}
	// Fails while this pod cannot confirm its lock (never because it does not lead), which
	// takes it out of the candidates.
	if err := mgr.AddReadyzCheck("lockwarden", lock.ReadyzCheck); err != nil {
		return nil, fmt.Errorf("add readyz check: %w", err)
	}
	return mgr, nil
}

// stamper stamps a ConfigMap with the pod that reconciled it and its fencing token. It runs
// only on the leader.
type stamper struct {
	client.Client
	writer string
	lock   *leadership.ResourceLock
}

// Reconcile stamps one ConfigMap.
func (r *stamper) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cm corev1.ConfigMap
	if err := r.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	token := r.lock.Token() // 0 once the term has ended
	if token == 0 {
		return ctrl.Result{}, errNotLeading
	}
	// The writer ID of the manager's term: read once, with the token.
	fencer := r.lock.Writer()
	if err := admit(&cm, token, fencer); err != nil {
		if errors.Is(err, errOtherWriter) {
			r.lock.Abandon(token) // the term is over for this process: never lead it again
		}
		return ctrl.Result{}, err
	}
	stamp := strconv.FormatInt(token, 10)
	if cm.Annotations[writerAnnotation] == r.writer && cm.Annotations[tokenAnnotation] == stamp && cm.Annotations[fenceAnnotation] == fencer {
		return ctrl.Result{}, nil
	}
	// The optimistic lock sends the resourceVersion read: a concurrent write makes it fail,
	// so admit's check and this write are one compare-and-swap.
	patch := client.MergeFromWithOptions(cm.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[writerAnnotation] = r.writer
	cm.Annotations[tokenAnnotation] = stamp
	cm.Annotations[fenceAnnotation] = fencer
	// Valid() reads the clock: a process paused since the checks above sees false here.
	if !r.lock.Valid() {
		return ctrl.Result{}, errNotLeading
	}
	if err := r.Patch(ctx, &cm, patch); err != nil {
		return ctrl.Result{}, fmt.Errorf("patch configmap %s: %w", req.NamespacedName, err)
	}
	return ctrl.Result{}, nil
}

// admit refuses token when cm was stamped with a higher one, or with the same one by another
// writer: fence < token, or fence = token from this writer.
func admit(cm *corev1.ConfigMap, token int64, writer string) error {
	v, ok := cm.Annotations[tokenAnnotation]
	if !ok {
		return nil
	}
	last, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return fmt.Errorf("parse annotation %s=%q: %w", tokenAnnotation, v, err)
	}
	switch {
	case last > token:
		return fmt.Errorf("%w: token %d, stamped with %d", errStale, token, last)
	case last == token && cm.Annotations[fenceAnnotation] != writer:
		return fmt.Errorf("%w: token %d, stamped by %s", errOtherWriter, token, cm.Annotations[fenceAnnotation])
	}
	return nil
}
