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

// ErrElectionLost is returned by Active.Start when this replica was active and lost the
// election: the process should exit, and a restart queues it as a standby.
var ErrElectionLost = errors.New("controller election lost")

// Active is a manager.Runnable that joins the controller election in etcd and runs the
// reconciler only while this replica holds it. Standbys wait in the election's FIFO queue
// with their caches warm; a graceful handover takes one etcd round trip.
//
// Grants hang on one shared grant lease whose ID is stored in etcd beside the election; a
// new epoch resumes it and adopts its keys, so a controller crash or rollout ends no term.
// A new grant lease is made only when none is alive. Shutdown releases the election, never
// the grants.
type Active struct {
	// Engine reaches etcd.
	Engine *lease.Engine
	// Manager provides the cache, clients and event recorder.
	Manager manager.Manager
	// Identity names this replica in the election record (the pod name).
	Identity string
	// ElectionTTL is the TTL of this replica's election session.
	ElectionTTL time.Duration
	// GrantTTL is the TTL of a new grant lease.
	GrantTTL time.Duration
	// MaxConcurrentReconciles bounds parallel reconciles (of different locks).
	MaxConcurrentReconciles int
	// Metrics, when set, records the controller's metrics.
	Metrics *Metrics
	// Retry is the pause between attempts to reach etcd while not elected. Default 1 s.
	Retry time.Duration

	mu  sync.Mutex
	rec *Reconciler
}

// AddToManager registers the controller's cache indexes (AddIndexes) and adds a to its
// Manager. Call it before the manager starts.
func (a *Active) AddToManager(ctx context.Context) error {
	if err := AddIndexes(ctx, a.Manager.GetFieldIndexer()); err != nil {
		return err
	}
	return a.Manager.Add(a)
}

// grantLeaseKey stores the grant lease ID (hex), on that lease, written only by the elected
// replica.
func (a *Active) grantLeaseKey() string { return a.Engine.Prefix() + "/controller/grant-lease" }

// NeedLeaderElection is false: the election is our own, in etcd.
func (a *Active) NeedLeaderElection() bool { return false }

// Healthy fails while the active reconciler reports a token regression.
func (a *Active) Healthy() error {
	a.mu.Lock()
	r := a.rec
	a.mu.Unlock()
	if r == nil {
		return nil
	}
	return r.Healthy()
}

// Start waits for the election, then reconciles until the election is lost (returning
// ErrElectionLost) or ctx ends (releasing the election and returning nil).
func (a *Active) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("election")
	retry := a.Retry
	if retry == 0 {
		retry = time.Second
	}
	for {
		session, election, err := a.campaign(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			logger.Info("waiting for etcd", "error", err.Error())
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(retry):
			}
			continue
		}
		logger.Info("elected", "epoch", election.Token())
		return a.lead(ctx, session, election)
	}
}

// campaign makes an election session and waits in the queue until elected.
func (a *Active) campaign(ctx context.Context) (*lease.Session, *lease.Lock, error) {
	session, err := a.Engine.NewSession(ctx, a.ElectionTTL)
	if err != nil {
		return nil, nil, err
	}
	election, err := session.Acquire(ctx, ElectionKey, a.Identity)
	if err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.ElectionTTL/3)
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
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.ElectionTTL/3)
		defer cancel()
		if err := election.Release(closeCtx); err == nil {
			_ = session.Close(closeCtx)
		} else {
			session.Orphan() // the election lease expires on its own
		}
	}()

	grants, err := a.grantSession(election.Context(), election)
	if err != nil {
		if election.Context().Err() != nil {
			return fmt.Errorf("%w: epoch %d: %w", ErrElectionLost, epoch, context.Cause(election.Context()))
		}
		return fmt.Errorf("epoch %d: grant lease: %w", epoch, err)
	}
	var r *Reconciler
	defer func() {
		grants.Orphan() // stop renewing; never revoke: the grants outlive this replica
		if r != nil {
			r.Wait()
		}
	}()

	r = &Reconciler{
		Client:    a.Manager.GetClient(),
		APIReader: a.Manager.GetAPIReader(),
		Recorder:  a.Manager.GetEventRecorder("lockwarden"),
		Engine:    a.Engine,
		Grants:    grants,
		Election:  election,
		Metrics:   a.Metrics,
	}
	c, err := r.NewController(a.Manager, a.MaxConcurrentReconciles)
	if err != nil {
		return fmt.Errorf("epoch %d: build controller: %w", epoch, err)
	}
	a.mu.Lock()
	a.rec = r
	a.mu.Unlock()
	a.Metrics.setActive(true, epoch)
	defer a.Metrics.setActive(false, epoch)

	runCtx, stop := context.WithCancel(election.Context())
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- c.Start(runCtx) }()
	drain := func() { // stop the controller and wait for it
		stop()
		if err := <-errc; err != nil {
			logger.Error(err, "controller stopped", "epoch", epoch)
		}
	}
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		r.probeEtcd(runCtx, a.Engine.Client(), a.grantLeaseKey(), max(a.ElectionTTL/5, 500*time.Millisecond))
	}()
	defer func() { stop(); <-probeDone }()

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
		if election.Context().Err() != nil {
			return fmt.Errorf("%w: epoch %d: %w", ErrElectionLost, epoch, election.Err())
		}
		return fmt.Errorf("epoch %d: controller stopped: %w", epoch, err)
	}
}

// grantSession resumes the grant lease named in etcd, or makes and records a new one when
// none is alive. The record is written guarded by the election.
func (a *Active) grantSession(ctx context.Context, election *lease.Lock) (*lease.Session, error) {
	cli := a.Engine.Client()
	resp, err := cli.Get(ctx, a.grantLeaseKey())
	if err != nil {
		return nil, fmt.Errorf("read grant lease: %w", err)
	}
	if len(resp.Kvs) == 1 {
		id, perr := strconv.ParseInt(string(resp.Kvs[0].Value), 16, 64)
		if perr == nil {
			s, err := a.Engine.ResumeSession(ctx, clientv3.LeaseID(id))
			if err == nil {
				return s, nil
			}
			if !errors.Is(err, lease.ErrSessionExpired) {
				return nil, fmt.Errorf("resume grant lease %x: %w", id, err)
			}
		}
	}
	s, err := a.Engine.NewSession(ctx, a.GrantTTL)
	if err != nil {
		return nil, fmt.Errorf("new grant lease: %w", err)
	}
	put, err := cli.Txn(ctx).If(election.IsOwner()).
		Then(clientv3.OpPut(a.grantLeaseKey(), strconv.FormatInt(int64(s.ID()), 16), clientv3.WithLease(s.ID()))).Commit()
	if err == nil && !put.Succeeded {
		err = lease.ErrGuardFailed
	}
	if err != nil {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = s.Close(closeCtx)
		return nil, fmt.Errorf("record grant lease: %w", err)
	}
	return s, nil
}
