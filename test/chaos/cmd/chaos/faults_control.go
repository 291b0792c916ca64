package main

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// lateStatusWrite plays issue 10's item 3: replica E1 publishes Releasing for a holder whose
// readiness probe failed; the probe passes again and E1 returns the term to Held, but that
// status write is held by E1's gate; the probe fails again and E1 is killed (deposed); E2
// takes over, sees Releasing and a holder that is not Ready. The held write is released
// late: with f.Member 0 just before E2's first write that publishes another
// holder, with 1 just after it. A published Held holder may be replaced only after Releasing
// and the delay, so the handoff checker fails a run where E2's grant follows the late Held.
func (r *run) lateStatusWrite(ctx context.Context, f chaos.Fault) error {
	e1 := r.activeManager(ctx)
	e2 := r.managers[0]
	if e2 == e1 {
		e2 = r.managers[1]
	}
	l, err := r.getLock(ctx)
	if err != nil || l.Status.Phase != lockv1.PhaseHeld {
		r.note("late write: the lock is not Held; skipped")
		return nil
	}
	uid, token := string(l.Status.HolderUID), l.Status.FencingToken
	s := r.holderSlot(ctx)
	s.setUnready(true)
	releasing := r.waitLock(ctx, r.h.timing.Lease+5*time.Second, func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseReleasing && l.Status.FencingToken == token
	})
	e1.gate.arm(func(map[string]any) bool { return true })
	s.setUnready(false)
	if !releasing {
		e1.gate.disarm()
		r.note("late write: %s never published Releasing for token %d: %v", e1.id, token, e1.gate.release(ctx))
		return nil
	}
	if !e1.gate.waitHeld(ctx, 1, 2*r.h.timing.LockDelay+5*time.Second) {
		e1.gate.disarm()
		r.note("late write: %s wrote no status while Releasing", e1.id)
		return nil
	}
	// The holder turns NotReady again, so that E2 does not return the term itself but ends it
	// after the delay, and E1 is deposed; its next incarnation writes freely, the held write
	// stays held.
	s.setUnready(true)
	defer s.setUnready(false)
	e1.gate.disarm()
	if p := e1.current(); p != nil {
		p.kill()
	}
	e2.gate.arm(func(st map[string]any) bool {
		h, _ := st["holderUID"].(string)
		return h != "" && h != uid
	})
	published := e2.gate.waitHeld(ctx, 1, r.h.timing.ElectionTTL+r.h.timing.LockDelay+10*time.Second)
	var late, next []int
	if f.Member == 0 || !published {
		late = e1.gate.release(ctx)
		e2.gate.disarm()
		next = e2.gate.release(ctx)
	} else {
		e2.gate.disarm()
		next = e2.gate.release(ctx)
		late = e1.gate.release(ctx)
	}
	r.note("late write: %s's held writes answered %v, %s's %v (new holder published: %v, late first: %v)",
		e1.id, late, e2.id, next, published, f.Member == 0 || !published)
	sleepCtx(ctx, f.Hold)
	return nil
}

// loseAcquireReply drops the replies of the active controller's etcd traffic from the moment
// the holder's termination is attested (a graceful deletion's terminal update) for the
// fault's hold: the grant of the next holder commits, its reply is lost.
func (r *run) loseAcquireReply(ctx context.Context) (healFunc, error) {
	m := r.activeManager(ctx)
	s := r.holderSlot(ctx)
	err := r.kubelet.gracefulDelete(ctx, s, deleteOpts{beforeTerminal: func() {
		for _, p := range m.proxies {
			p.srv.BlackholeRx()
		}
	}})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		for _, p := range m.proxies {
			p.srv.UnblackholeRx()
		}
		return r.startPod(ctx, s)
	}, nil
}

// hungMemberDetection is how long an etcd client takes to stop using a member that stopped
// answering without closing its connections: gRPC keepalive time + timeout.
const hungMemberDetection = 10 * time.Second

// stalledWatch SIGSTOPs an etcd follower: watches served by it stall without an error while
// the cluster keeps its quorum. Then the active controller is killed and the holder deleted
// gracefully, so that a standby must take over (its election wait may be one of the stalled
// watches) and grant: the liveness bound applies while the member stays stopped.
func (r *run) stalledWatch(ctx context.Context, f chaos.Fault) (healFunc, error) {
	var active *manager
	if !r.sched.Engine() {
		active = r.activeManager(ctx) // before the stop: its read could go to the stopped member
	}
	leader := r.h.etcd.leader(ctx)
	var followers []*member
	for i, m := range r.h.etcd.members {
		if i != leader && m.proc != nil {
			followers = append(followers, m)
		}
	}
	if len(followers) == 0 {
		r.note("stalled watch: no follower running")
		return nothing, nil
	}
	mem := followers[f.Member%len(followers)]
	if r.sched.Engine() {
		return r.engineStalledWatch(ctx, f, mem)
	}
	mem.proc.signal(syscall.SIGSTOP)
	resume := func(context.Context) error { mem.proc.signal(syscall.SIGCONT); return nil }
	r.note("stalled watch: %s stopped", mem.name)
	if p := active.current(); p != nil {
		p.kill()
	}
	s := r.holderSlot(ctx)
	if err := r.kubelet.gracefulDelete(ctx, s, deleteOpts{}); err != nil {
		return resume, err
	}
	// A stopped member is not a failed one: its TCP connections stay up, so the managers'
	// etcd clients keep routing a share of their calls to it until gRPC's keepalive gives up
	// on it (cmd/lockwarden: DialKeepAliveTime + DialKeepAliveTimeout, 5 s + 5 s; etcd
	// refuses keepalives more frequent than 5 s). Each such call costs its own deadline and a
	// retry; the new epoch's first calls can meet it several times in a row. The bound adds
	// that detection once.
	if err := r.checkLiveness(ctx, f.Kind+" (member stopped)", r.h.livenessBound()+hungMemberDetection); err != nil {
		return resume, err
	}
	return func(ctx context.Context) error {
		if err := resume(ctx); err != nil {
			return err
		}
		return r.startPod(ctx, s)
	}, nil
}

func (s *slot) setUnready(b bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unready = b
}

func (r *run) getLock(ctx context.Context) (*lockv1.DistributedLock, error) {
	var l lockv1.DistributedLock
	if err := r.h.k8s.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: lockName}, &l); err != nil {
		return nil, fmt.Errorf("get lock: %w", err)
	}
	return &l, nil
}

// waitLock polls the lock until ok accepts it, and reports whether it did within limit.
func (r *run) waitLock(ctx context.Context, limit time.Duration, ok func(*lockv1.DistributedLock) bool) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if l, err := r.getLock(ctx); err == nil && ok(l) {
			return true
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
	return false
}
