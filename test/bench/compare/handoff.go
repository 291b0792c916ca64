package main

import (
	"context"
	"fmt"
	"github.com/lockwarden/lockwarden/internal/podsim"
	"io"
	"math/rand/v2"
	"time"
)

// handoffResult is one system at one timing: planned handoffs and, as a by-product, how
// fast the other candidates learn of a new holder.
type handoffResult struct {
	system string
	timing timing
	// handoffs: the holder told to stop (t0) -> another candidate's OnStartedLeading.
	handoffs []time.Duration
	// lockwarden: the grant's etcd commit -> the new holder pod's OnNewHolder (its watch, or
	// a read) / -> the first OnNewHolder of any candidate pod / -> its OnStartedLeading.
	commitToSeen, commitToSeenAny, commitToStarted []time.Duration
	// client-go: the new leader's OnStartedLeading -> the other standby's OnNewLeader.
	leaderToSeen []time.Duration
}

const candidatesPerLock = 3

// settle is a random pause between samples, so that the standbys' poll phases (client-go)
// and the controller's periodic work (lockwarden) are not in step with the samples.
func settle(ctx context.Context, base time.Duration) error {
	select {
	case <-time.After(base + rand.N(base)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// handoffLockwarden measures n planned handoffs (after one warm-up) of one DistributedLock
// with 3 candidate pods: the holder's process stops (its elector is cancelled and returns),
// the kubelet reports its container terminated and deletes the pod; the next pod leads when
// its OnStartedLeading is called. A new pod replaces the stopped one before the next sample.
func handoffLockwarden(ctx context.Context, s *stack, t timing, n int, progress io.Writer) (r *handoffResult, err error) {
	ns := fmt.Sprintf("handoff-lw-%d", int(t.lease.Seconds()))
	if err := s.namespace(ctx, ns); err != nil {
		return nil, err
	}
	const lock = "leader"
	if err := s.createLock(ctx, ns, lock, t.lease); err != nil {
		return nil, err
	}
	k := &podsim.Kubelet{Client: s.bulk, Namespace: ns}
	rec := newRecorder()
	col := newCollector(rec)
	wctx, stopWatch := context.WithCancel(ctx)
	watchDone := watchGrants(wctx, s.etcdCli, "/lockwarden/locks/"+ns+"/"+lock, col.commits)
	cands := map[string]*candidate{}
	defer func() {
		stopWatch()
		<-watchDone
		all := make([]*candidate, 0, len(cands))
		for _, c := range cands {
			all = append(all, c)
		}
		stopAll(all)
	}()
	seq := 0
	add := func() (*candidate, error) {
		name := fmt.Sprintf("pod-%d", seq)
		seq++
		c, err := startPodCandidate(ctx, s.env.Config, k, lock, name, map[string]string{"lock": lock}, rec)
		if err != nil {
			return nil, err
		}
		cands[name] = c
		return c, nil
	}
	for range candidatesPerLock {
		if _, err := add(); err != nil {
			return nil, err
		}
	}
	first, err := col.waitStarted(ctx, time.Minute, func(event) bool { return true })
	if err != nil {
		return nil, fmt.Errorf("first holder: %w", err)
	}
	holder := first.who
	r = &handoffResult{system: "lockwarden", timing: t}
	for i := range n + 1 {
		if err := settle(ctx, 300*time.Millisecond); err != nil {
			return nil, err
		}
		col.reset()
		old := cands[holder]
		t0 := time.Now()
		old.stop()
		if err := k.GracefulExit(ctx, old.pod); err != nil {
			return nil, err
		}
		delete(cands, holder)
		next, err := col.waitStarted(ctx, 3*t.lease+30*time.Second, func(e event) bool { return e.who != holder })
		if err != nil {
			return nil, fmt.Errorf("handoff %d from %s: %w", i, holder, err)
		}
		if i > 0 { // the first is a warm-up
			r.handoffs = append(r.handoffs, next.at.Sub(t0))
			if at, ok := col.waitCommit(ctx, next.token, 5*time.Second); ok {
				r.commitToStarted = append(r.commitToStarted, next.at.Sub(at))
				if e, err := col.waitSeen(ctx, 5*time.Second, func(e event) bool { return e.who == next.who && e.token == next.token }); err == nil {
					r.commitToSeen = append(r.commitToSeen, e.at.Sub(at))
				}
				var firstSeen time.Time
				for _, e := range col.seen {
					if e.token == next.token && (firstSeen.IsZero() || e.at.Before(firstSeen)) {
						firstSeen = e.at
					}
				}
				if !firstSeen.IsZero() {
					r.commitToSeenAny = append(r.commitToSeenAny, firstSeen.Sub(at))
				}
			}
		}
		holder = next.who
		c, err := add()
		if err != nil {
			return nil, err
		}
		// The replacement is in the race only once its elector has read the lock.
		if _, err := col.waitSeen(ctx, 30*time.Second, func(e event) bool { return e.who == c.name && e.holder == holder }); err != nil {
			return nil, fmt.Errorf("replacement %s: %w", c.name, err)
		}
	}
	fmt.Fprintf(progress, "  lockwarden %v: %s\n", t, brief(r.handoffs))
	return r, nil
}

// handoffClientGo measures n planned handoffs (after one warm-up) of one client-go
// leaderelection Lease with 3 candidates and ReleaseOnCancel: the leader's context is
// cancelled (t0), it releases the Lease, a standby's OnStartedLeading ends the sample.
func handoffClientGo(ctx context.Context, s *stack, t timing, n int, progress io.Writer) (r *handoffResult, err error) {
	ns := fmt.Sprintf("handoff-cg-%d", int(t.lease.Seconds()))
	if err := s.namespace(ctx, ns); err != nil {
		return nil, err
	}
	const lock = "leader"
	rec := newRecorder()
	col := newCollector(rec)
	cands := map[string]*candidate{}
	defer func() {
		all := make([]*candidate, 0, len(cands))
		for _, c := range cands {
			all = append(all, c)
		}
		stopAll(all)
	}()
	seq := 0
	add := func() (*candidate, error) {
		id := fmt.Sprintf("cand-%d", seq)
		seq++
		c, err := startClientGoCandidate(ctx, s.env.Config, ns, lock, id, t, true, rec)
		if err != nil {
			return nil, err
		}
		cands[id] = c
		return c, nil
	}
	for range candidatesPerLock {
		if _, err := add(); err != nil {
			return nil, err
		}
	}
	first, err := col.waitStarted(ctx, time.Minute, func(event) bool { return true })
	if err != nil {
		return nil, fmt.Errorf("first leader: %w", err)
	}
	holder := first.who
	r = &handoffResult{system: "client-go", timing: t}
	for i := range n + 1 {
		// Long enough that the replacement's poll phase is random relative to t0.
		if err := settle(ctx, t.retry/2); err != nil {
			return nil, err
		}
		col.reset()
		old := cands[holder]
		t0 := time.Now()
		old.cancel() // Run releases the Lease, then returns
		next, err := col.waitStarted(ctx, 3*t.lease+30*time.Second, func(e event) bool { return e.who != holder })
		if err != nil {
			return nil, fmt.Errorf("handoff %d from %s: %w", i, holder, err)
		}
		<-old.done
		delete(cands, holder)
		if i > 0 {
			r.handoffs = append(r.handoffs, next.at.Sub(t0))
			// The remaining standby learns of the new leader at its next poll.
			if e, err := col.waitSeen(ctx, 3*t.retry+5*time.Second, func(e event) bool { return e.who != next.who && e.holder == next.who }); err == nil {
				r.leaderToSeen = append(r.leaderToSeen, e.at.Sub(next.at))
			}
		}
		holder = next.who
		c, err := add()
		if err != nil {
			return nil, err
		}
		if _, err := col.waitSeen(ctx, 30*time.Second, func(e event) bool { return e.who == c.name && e.holder == holder }); err != nil {
			return nil, fmt.Errorf("replacement %s: %w", c.name, err)
		}
	}
	fmt.Fprintf(progress, "  client-go  %v: %s\n", t, brief(r.handoffs))
	return r, nil
}
