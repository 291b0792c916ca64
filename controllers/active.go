package controllers

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// ErrElectionLost means this replica lost (or no longer holds) the controller election: it
// must stop reconciling; the process should exit, and a restart queues it as a standby.
var ErrElectionLost = errors.New("controller election lost")

// ActiveConfig configures an Active.
type ActiveConfig struct {
	// Engine reaches etcd. Required.
	Engine *lease.Engine
	// Manager provides the cache, clients and event recorder. Required.
	Manager manager.Manager
	// Identity names this replica in the election record (the pod name). Required.
	Identity string
	// ElectionTTL is the TTL of this replica's election session: whole seconds, at least
	// lease.MinTTL. Required.
	ElectionTTL time.Duration
	// GrantTTL is the TTL of a new grant lease: whole seconds, above ElectionTTL, so that the
	// grants outlive a handover. Required.
	GrantTTL time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles (of different locks). Default 1.
	MaxConcurrentReconciles int
	// Metrics, when set, records the controller's metrics.
	Metrics *Metrics
	// Retry is the pause between attempts to reach etcd while not elected. Default 1 s.
	Retry time.Duration
	// Cluster is this manager's identity among the clusters that share Global locks
	// (--cluster-name, registered by RegisterCluster). Zero: every Global lock gets Held=False
	// ClusterNameUnset and nothing else.
	Cluster lease.ClusterID
	// Global is the shared etcd's side of Global locks; required with Cluster. Its keys live
	// in the etcd of Engine, whose election's IsOwner guards every global transaction.
	Global *lease.Global
}

// Validate reports the first invalid field.
func (c *ActiveConfig) Validate() error {
	switch {
	case c.Engine == nil:
		return errors.New("active: Engine is required")
	case c.Manager == nil:
		return errors.New("active: Manager is required")
	case c.Identity == "":
		return errors.New("active: Identity is required")
	case c.ElectionTTL < lease.MinTTL || c.ElectionTTL%time.Second != 0:
		return fmt.Errorf("active: ElectionTTL %v must be whole seconds and at least %v", c.ElectionTTL, lease.MinTTL)
	case c.GrantTTL <= c.ElectionTTL || c.GrantTTL%time.Second != 0:
		return fmt.Errorf("active: GrantTTL %v must be whole seconds and above ElectionTTL %v", c.GrantTTL, c.ElectionTTL)
	case c.Cluster.Name != "" && (c.Global == nil || c.Cluster.UID == ""):
		return errors.New("active: a Cluster needs Global and a registered UID (RegisterCluster)")
	case c.MaxConcurrentReconciles < 0 || c.Retry < 0:
		return errors.New("active: MaxConcurrentReconciles and Retry must not be negative")
	}
	return nil
}

// Active is a manager.Runnable that joins the controller election in etcd and runs the
// reconciler only while this replica holds it. Standbys wait in the election's FIFO queue
// with their caches warm; a graceful handover takes one etcd round trip.
//
// Grants hang on one shared grant lease, recorded in etcd as the lock GrantLeaseKey held on
// that lease; a new epoch resumes it, so a controller crash or rollout ends no term. A new
// grant lease is made only when none is alive. Shutdown releases the election, never the
// grants. A held lock costs no goroutine or watch of its own: one watch of the lock prefix
// wakes the locks whose keys change.
type Active struct {
	cfg  ActiveConfig
	mu   sync.Mutex
	rec  *Reconciler
	grec *GlobalReconciler
}

// NewActive validates cfg and returns the runnable; an invalid config is an error here, never
// a retry loop later.
func NewActive(cfg ActiveConfig) (*Active, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Retry == 0 {
		cfg.Retry = time.Second
	}
	cfg.MaxConcurrentReconciles = max(1, cfg.MaxConcurrentReconciles)
	return &Active{cfg: cfg}, nil
}

// AddToManager registers the controller's cache indexes (AddIndexes) and adds a to its
// Manager. Call it before the manager starts.
func (a *Active) AddToManager(ctx context.Context) error {
	if err := AddIndexes(ctx, a.cfg.Manager.GetFieldIndexer()); err != nil {
		return err
	}
	return a.cfg.Manager.Add(a)
}

// NeedLeaderElection is false: the election is our own, in etcd.
func (a *Active) NeedLeaderElection() bool { return false }

// Healthy fails while the active reconciler, or its Global lock reconciler, reports a token
// regression.
func (a *Active) Healthy() error {
	a.mu.Lock()
	r, gr := a.rec, a.grec
	a.mu.Unlock()
	if r == nil {
		return nil
	}
	if err := r.Healthy(); err != nil {
		return err
	}
	if gr != nil {
		return gr.Healthy()
	}
	return nil
}

// Start waits for the election, then reconciles until the election is lost (returning
// ErrElectionLost) or ctx ends (releasing the election and returning nil).
func (a *Active) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("election")
	for {
		session, election, err := a.campaign(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, lease.ErrInvalid) {
			return fmt.Errorf("join the election: %w", err) // retrying cannot help
		}
		if err != nil {
			logger.Info("waiting for etcd", "error", err.Error())
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(a.cfg.Retry):
			}
			continue
		}
		logger.Info("elected", "epoch", election.Token())
		return a.lead(ctx, session, election)
	}
}

// campaign makes an election session and waits in the queue until elected.
func (a *Active) campaign(ctx context.Context) (*lease.Session, *lease.Lock, error) {
	session, err := a.cfg.Engine.NewSession(ctx, a.cfg.ElectionTTL)
	if err != nil {
		return nil, nil, err
	}
	election, err := session.Acquire(ctx, ElectionKey, a.cfg.Identity)
	if err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.ElectionTTL/3)
		defer cancel()
		_ = session.Close(closeCtx) // the lease expires by itself if this fails
		return nil, nil, err
	}
	return session, election, nil
}

// lead runs the reconciler for one epoch.
func (a *Active) lead(ctx context.Context, session *lease.Session, election *lease.Lock) error {
	logger := log.FromContext(ctx).WithName("election")
	epoch := election.Token()
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.ElectionTTL/3)
		defer cancel()
		if err := election.Release(closeCtx); err == nil {
			_ = session.Close(closeCtx)
		} else {
			session.Orphan() // the election lease expires on its own
		}
	}()

	grants, err := a.grants(election.Context(), election)
	if err != nil {
		if election.Context().Err() != nil {
			return fmt.Errorf("%w: epoch %d: %w", ErrElectionLost, epoch, context.Cause(election.Context()))
		}
		return fmt.Errorf("epoch %d: grant lease: %w", epoch, err)
	}
	defer grants.Orphan() // stop renewing; never revoke: the grants outlive this replica

	mgr := a.cfg.Manager
	r := &Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("lockwarden"),
		Engine:    a.cfg.Engine,
		Grants:    grants,
		Election:  election,
		Metrics:   a.cfg.Metrics,
	}
	c, err := r.NewController(mgr, a.cfg.MaxConcurrentReconciles)
	if err != nil {
		return fmt.Errorf("epoch %d: build controller: %w", epoch, err)
	}
	gr := &GlobalReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("lockwarden"),
		Election:  election,
		Cluster:   a.cfg.Cluster,
	}
	if a.cfg.Global != nil {
		gr.Global = a.cfg.Global
	}
	gc, err := gr.NewController(mgr, a.cfg.MaxConcurrentReconciles)
	if err != nil {
		return fmt.Errorf("epoch %d: build the Global lock controller: %w", epoch, err)
	}
	a.mu.Lock()
	a.rec, a.grec = r, gr
	a.mu.Unlock()
	a.cfg.Metrics.setActive(true, epoch)
	defer a.cfg.Metrics.setActive(false, epoch)

	drained := 0 // controllers already stopped when drain runs
	runCtx, stop := context.WithCancel(election.Context())
	defer stop()
	errc := make(chan error, 2)
	go func() { errc <- c.Start(runCtx) }()
	go func() { errc <- gc.Start(runCtx) }()
	drain := func() { // stop the controllers and wait for them
		stop()
		for range 2 - drained {
			if err := <-errc; err != nil {
				logger.Error(err, "controller stopped", "epoch", epoch)
			}
		}
	}
	var helpers sync.WaitGroup
	defer func() { stop(); helpers.Wait() }()
	helpers.Go(func() { r.probeEtcd(runCtx, max(a.cfg.ElectionTTL/5, 500*time.Millisecond)) })
	helpers.Go(func() {
		// One watch of every lock key wakes the lock whose key changed (a vanished key, an
		// operator's delete); after a failed watch every lock is read again.
		_ = a.cfg.Engine.WatchLockChanges(runCtx, r.wakeChange, func() { r.wakeAll(runCtx) })
	})
	if a.cfg.Global != nil && a.cfg.Cluster.Name != "" {
		// One watch of the global keys wakes the Global locks of the name whose K or T
		// changed; after a failed watch every Global lock is read again.
		helpers.Go(func() {
			_ = a.cfg.Global.Watch(runCtx, func(name string) { gr.wakeName(runCtx, name) }, func() { gr.wakeAll(runCtx) })
		})
	}

	select {
	case <-ctx.Done():
		drain()
		logger.Info("shutting down; releasing the election", "epoch", epoch)
		return nil
	case <-grants.Done():
		drain()
		return fmt.Errorf("epoch %d: grant lease %x ended: %w", epoch, int64(grants.ID()), grants.Err())
	case <-election.Done():
		drain()
		return fmt.Errorf("%w: epoch %d: %w", ErrElectionLost, epoch, election.Err())
	case err := <-errc:
		drained = 1
		drain()
		if election.Context().Err() != nil {
			return fmt.Errorf("%w: epoch %d: %w", ErrElectionLost, epoch, election.Err())
		}
		return fmt.Errorf("epoch %d: controller stopped: %w", epoch, err)
	}
}

// grants gets the grant session for this epoch, each attempt bounded by ElectionTTL/4 and
// retried while the election lasts: one hung etcd member (stopped, not refusing) would
// otherwise hold the new epoch until gRPC's keepalive gives up on it, and the process would
// exit and hand the election on, costing another failover.
func (a *Active) grants(ctx context.Context, election *lease.Lock) (*lease.Session, error) {
	for {
		actx, cancel := context.WithTimeout(ctx, a.cfg.ElectionTTL/4)
		s, err := a.grantSession(actx, election)
		cancel()
		switch {
		case err == nil:
			return s, nil
		case ctx.Err() != nil, errors.Is(err, lease.ErrInvalid), errors.Is(err, lease.ErrGuardFailed):
			return nil, err
		}
		log.FromContext(ctx).Info("grant lease not ready; retrying", "error", err.Error())
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(a.cfg.Retry):
		}
	}
}

// grantSession resumes the grant lease recorded in etcd, or makes and records a new one when
// none is alive. The record is the lock GrantLeaseKey, held on the grant lease itself and
// granted guarded by the election.
func (a *Active) grantSession(ctx context.Context, election *lease.Lock) (*lease.Session, error) {
	eng := a.cfg.Engine
	h, err := eng.Inspect(ctx, GrantLeaseKey)
	if err != nil {
		return nil, fmt.Errorf("read grant lease: %w", err)
	}
	if h.Token > 0 && h.Lease != clientv3.NoLease {
		s, err := eng.ResumeSession(ctx, h.Lease)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, lease.ErrSessionExpired) {
			return nil, fmt.Errorf("resume grant lease %x: %w", int64(h.Lease), err)
		}
	}
	s, err := eng.NewSession(ctx, a.cfg.GrantTTL)
	if err != nil {
		return nil, fmt.Errorf("new grant lease: %w", err)
	}
	if _, err := s.Grant(ctx, GrantLeaseKey, strconv.FormatInt(int64(s.ID()), 16), lease.WithGuard(election.IsOwner())); err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = s.Close(closeCtx)
		return nil, fmt.Errorf("record grant lease: %w", err)
	}
	return s, nil
}
