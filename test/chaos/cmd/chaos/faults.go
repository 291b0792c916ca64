package main

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/pkg/lease"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// livenessBound is election-ttl + detection + lockDelay + 2 s, detection being the lease
// (a worker turns unready after lease - margin without a read) plus the kubelet's probes.
func (h *harness) livenessBound() time.Duration {
	detection := h.timing.Lease + failureThreshold*probePeriod + probeTimeout
	return h.timing.ElectionTTL + detection + h.timing.LockDelay + 2*time.Second
}

// inject runs the schedule: each fault after its gap, held, healed, then liveness checked.
func (r *run) inject(ctx context.Context) error {
	for _, f := range r.sched.Faults {
		sleepCtx(ctx, f.Gap)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.note("inject %s for %v", f.Kind, f.Hold)
		heal, err := r.fault(ctx, f)
		if err != nil {
			return fmt.Errorf("inject %s: %w", f.Kind, err)
		}
		if r.notInjected {
			r.notInjected = false // the fault found nothing to act on: not counted
		} else {
			r.faults[f.Kind]++
		}
		if f.Kind == chaos.EtcdRestore {
			continue // it heals and checks itself
		}
		sleepCtx(ctx, f.Hold)
		if err := heal(ctx); err != nil {
			return fmt.Errorf("heal %s: %w", f.Kind, err)
		}
		r.note("healed %s", f.Kind)
		if err := r.checkLiveness(ctx, f.Kind, r.h.livenessBound()); err != nil {
			return err
		}
	}
	return nil
}

// checkLiveness waits for a write after a heal and records a violation past bound.
func (r *run) checkLiveness(ctx context.Context, kind string, bound time.Duration) error {
	took, vs, err := r.recovery(ctx, bound)
	if err != nil {
		return err
	}
	if len(vs) > 0 {
		r.violate("liveness", "after %s: %s", kind, vs[0].Detail)
		if r.sched.Engine() {
			r.noteEngineLock(ctx)
		}
		return nil
	}
	r.mu.Lock()
	r.liveness = append(r.liveness, took)
	r.mu.Unlock()
	return nil
}

// recovery waits for a write from now on and returns how long it took, or CheckLiveness's
// violation past bound; an error only when ctx ended.
func (r *run) recovery(ctx context.Context, bound time.Duration) (time.Duration, []chaos.Violation, error) {
	healed := chaos.Mono()
	progressed, err := r.waitProgress(ctx, bound+5*time.Second)
	if ctx.Err() != nil {
		return 0, nil, ctx.Err()
	}
	if err != nil {
		progressed = 0
	}
	if vs := chaos.CheckLiveness(healed, progressed, bound); len(vs) > 0 {
		return 0, vs, nil
	}
	return time.Duration(progressed - healed), nil, nil
}

type healFunc func(context.Context) error

func nothing(context.Context) error { return nil }

// fault injects f and returns what heals it.
func (r *run) fault(ctx context.Context, f chaos.Fault) (healFunc, error) {
	switch f.Kind {
	case chaos.WorkerPauseShort, chaos.WorkerPauseLong:
		w := r.holderSlot(ctx).worker()
		if w == nil {
			return nothing, nil
		}
		w.p.signal(syscall.SIGSTOP)
		return func(context.Context) error { w.p.signal(syscall.SIGCONT); return nil }, nil

	case chaos.WorkerKill:
		s := r.holderSlot(ctx)
		if w := s.worker(); w != nil {
			w.p.kill()
		}
		return func(ctx context.Context) error { return r.replacePod(ctx, s, false) }, nil

	case chaos.DropStatus, chaos.LoseRelease:
		// The failpoints are armed in both managers for the whole run; a graceful deletion of
		// the holder is an attested termination: a release, then a grant.
		s := r.holderSlot(ctx)
		if err := r.kubelet.gracefulDelete(ctx, s, deleteOpts{}); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return r.startPod(ctx, s) }, nil

	case chaos.PodRecreate:
		s := r.holderSlot(ctx)
		if err := r.kubelet.forceDelete(ctx, s); err != nil {
			return nil, err
		}
		// The old worker keeps running, with the old UID, until the run ends.
		return func(ctx context.Context) error { return r.replacePod(ctx, s, true) }, nil

	case chaos.APIHold, chaos.APIRefuse, chaos.ResourceLockAPIPause, chaos.AgentExecAPIPause:
		// The last two: the same hold, in a run whose workers are ResourceLock managers or
		// lockwarden-agent exec (Schedule.Worker).
		s := r.holderSlot(ctx)
		mode := apiproxy.Hold
		if f.Kind == chaos.APIRefuse {
			mode = apiproxy.Refuse
		}
		s.api.SetMode(mode)
		return func(context.Context) error { s.api.SetMode(apiproxy.Pass); return nil }, nil

	case chaos.APIReplay:
		n := 0
		for _, s := range r.slots {
			frames := s.api.Frames()
			for _, fr := range frames[:min(len(frames), 3)] { // the oldest: stale
				n += s.api.Replay(fr)
			}
		}
		r.note("replayed %d stale watch frames", n)
		return nothing, nil

	case chaos.EtcdBlackhole, chaos.EtcdDelay:
		m := r.activeManager(ctx)
		for _, p := range m.proxies {
			if f.Kind == chaos.EtcdBlackhole {
				p.blackhole()
			} else {
				p.delay(2*f.Jitter, f.Jitter)
			}
		}
		return func(context.Context) error {
			for _, p := range m.proxies {
				p.heal()
			}
			return nil
		}, nil

	case chaos.PeerBlackhole:
		m := r.h.etcd.members[f.Member]
		if f.Member == 0 { // member 0 stands for "the leader"
			if i := r.h.etcd.leader(ctx); i >= 0 {
				m = r.h.etcd.members[i]
			}
		}
		m.peerProxy.blackhole()
		return func(context.Context) error { m.peerProxy.heal(); return nil }, nil

	case chaos.PeerDelay:
		for _, m := range r.h.etcd.members {
			m.peerProxy.delay(2*f.Jitter, f.Jitter)
		}
		return func(context.Context) error {
			for _, m := range r.h.etcd.members {
				m.peerProxy.heal()
			}
			return nil
		}, nil

	case chaos.EtcdLeaderKill:
		i := r.h.etcd.leader(ctx)
		if i < 0 {
			i = f.Member
		}
		m := r.h.etcd.members[i]
		r.h.etcd.kill(m)
		return func(context.Context) error { return r.h.etcd.restart(m) }, nil

	case chaos.ControllerKill:
		if p := r.activeManager(ctx).current(); p != nil {
			p.kill() // the supervisor restarts it; it queues as a standby
		}
		return nothing, nil

	case chaos.ControllerZombie:
		m := r.activeManager(ctx)
		m.signal(syscall.SIGSTOP)
		return func(context.Context) error { m.signal(syscall.SIGCONT); return nil }, nil

	case chaos.ReadinessFlap:
		s := r.holderSlot(ctx)
		s.mu.Lock()
		s.flapFrom, s.flapTill, s.flapStep = time.Now(), time.Now().Add(f.Hold), f.Jitter
		s.mu.Unlock()
		return nothing, nil

	case chaos.LeaseLower:
		if err := r.setLease(ctx, r.h.timing.Lease-time.Second); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return r.setLease(ctx, r.h.timing.Lease) }, nil

	case chaos.EtcdRestore:
		return nothing, r.restore(ctx, f)

	case chaos.CrashRestart, chaos.CrashRestartSidecar, chaos.SidecarDelete, chaos.NodePodGC:
		return r.kubeletFault(ctx, f)

	case chaos.LateStatusWrite:
		return nothing, r.lateStatusWrite(ctx, f)

	case chaos.LoseAcquireReply:
		return r.loseAcquireReply(ctx)

	case chaos.StalledWatch, chaos.EngineStalledWatch:
		return r.stalledWatch(ctx, f)

	case chaos.EngineForceRelease, chaos.EngineLoseAcquireReply:
		return r.engineFault(ctx, f)

	case chaos.EngineHandoffExpiry:
		return r.engineHandoffExpiry(ctx, f)

	case chaos.WorkerStall, chaos.EngineStall:
		return r.stallFault(ctx, f)

	case chaos.RoutingMove:
		return r.routingMove(ctx, f)

	case chaos.SlotsStall:
		return r.slotsStall(ctx, f)
	}
	return nil, fmt.Errorf("unknown fault kind %q", f.Kind)
}

func (s *slot) worker() *workerProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w
}

// replacePod does what a StatefulSet does after its pod is gone: delete the old object if
// it is still there (gracefully: the kubelet stops the worker and reports it terminated),
// create one with the same name (a new UID) and start its worker. With orphan, the old
// object is already gone and its worker keeps running unattached.
func (r *run) replacePod(ctx context.Context, s *slot, orphan bool) error {
	if !orphan {
		if err := r.kubelet.gracefulDelete(ctx, s, deleteOpts{}); err != nil {
			return err
		}
	}
	return r.startPod(ctx, s)
}

// activeManager returns the manager that holds the controller election now (the first
// one when none does).
func (r *run) activeManager(ctx context.Context) *manager {
	cli, err := r.h.etcd.client()
	if err == nil {
		defer cli.Close()
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if h, err := lease.NewEngine(cli, lease.WithPrefix(r.prefix)).Inspect(ctx, "_controller"); err == nil {
			for _, m := range r.managers {
				if m.id == h.Holder {
					return m
				}
			}
		}
	}
	return r.managers[0]
}

func (r *run) setLease(ctx context.Context, d time.Duration) error {
	for range 5 {
		var l lockv1.DistributedLock
		if err := r.h.k8s.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: lockName}, &l); err != nil {
			return err
		}
		l.Spec.LeaseDurationSeconds = int32(d / time.Second)
		if err := r.h.k8s.Update(ctx, &l); err == nil {
			return nil
		}
	}
	return fmt.Errorf("set leaseDurationSeconds to %v: too many conflicts", d)
}

// restore takes a snapshot while the lock is held, makes a newer grant, restores the
// snapshot without a revision bump (the controller must grant nothing and report the
// regression), then with one (liveness applies again).
func (r *run) restore(ctx context.Context, f chaos.Fault) error {
	snap := filepath.Join(r.dir, "snapshot.db")
	if err := r.h.etcd.snapshot(ctx, snap); err != nil {
		return err
	}
	before := r.publishedToken(ctx)
	// A newer grant than the snapshot: end the holder's term gracefully (attested).
	s := r.holderSlot(ctx)
	if err := r.replacePod(ctx, s, false); err != nil {
		return err
	}
	newer, err := r.waitToken(ctx, before, r.h.livenessBound())
	if err != nil {
		r.violate("liveness", "no grant after the holder exited before the restore: %v", err)
		return nil
	}
	if _, err := r.waitProgress(ctx, r.h.livenessBound()); err != nil {
		r.violate("liveness", "no write with token %d before the restore: %v", newer, err)
	}
	r.note("snapshot at token %d, now token %d; restoring without --bump-revision", before, newer)

	if err := r.h.etcd.restore(snap, 0); err != nil {
		return err
	}
	sleepCtx(ctx, f.Hold+r.h.timing.ElectionTTL)
	if tok := r.publishedToken(ctx); tok < newer {
		r.violate("restore", "status token %d below %d after a restore without --bump-revision", tok, newer)
	}
	if !r.regressionReported(ctx) {
		r.violate("restore", "no TokenRegression reported %v after a restore without --bump-revision", f.Hold+r.h.timing.ElectionTTL)
	}
	r.note("restoring with --bump-revision")
	if err := r.h.etcd.restore(snap, 1_000_000_000); err != nil {
		return err
	}
	// The holder published before the restore may simply keep leading; liveness after the
	// bump means a new grant: end its term (attested) and wait for the next holder's writes.
	sleepCtx(ctx, r.h.timing.ElectionTTL)
	if err := r.replacePod(ctx, r.holderSlot(ctx), false); err != nil {
		return err
	}
	healed := chaos.Mono()
	bound := r.h.livenessBound() + r.h.timing.ElectionTTL
	if tok, err := r.waitToken(ctx, newer, bound); err != nil {
		r.violate("liveness", "after a restore with --bump-revision: %v (regression reported: %v)", err, r.regressionReported(ctx))
		return nil
	} else {
		r.note("granted token %d after the bumped restore", tok)
	}
	progressed, err := r.waitProgress(ctx, bound)
	if err != nil {
		progressed = 0
	}
	for _, v := range chaos.CheckLiveness(healed, progressed, bound) {
		r.violate("liveness", "after a restore with --bump-revision: %s", v.Detail)
	}
	return nil
}

func (r *run) publishedToken(ctx context.Context) int64 {
	var l lockv1.DistributedLock
	if err := r.h.k8s.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: lockName}, &l); err != nil {
		return 0
	}
	return l.Status.FencingToken
}

// waitToken waits for a published Held token above old.
func (r *run) waitToken(ctx context.Context, old int64, limit time.Duration) (int64, error) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		var l lockv1.DistributedLock
		if err := r.h.k8s.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: lockName}, &l); err == nil &&
			l.Status.Phase == lockv1.PhaseHeld && l.Status.FencingToken > old {
			return l.Status.FencingToken, nil
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return 0, fmt.Errorf("no grant above token %d within %v", old, limit)
}

// regressionReported looks for the report: a Valid=False TokenRegression condition, or a
// TokenRegression Event on the lock.
func (r *run) regressionReported(ctx context.Context) bool {
	var l lockv1.DistributedLock
	if err := r.h.k8s.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: lockName}, &l); err == nil {
		for _, c := range l.Status.Conditions {
			if c.Type == lockv1.ConditionValid && c.Status == metav1.ConditionFalse && c.Reason == lockv1.ReasonTokenRegression {
				return true
			}
		}
	}
	var evs eventsv1.EventList
	if err := r.h.k8s.List(ctx, &evs, client.InNamespace(r.ns)); err == nil {
		for _, e := range evs.Items {
			if e.Reason == lockv1.ReasonTokenRegression {
				return true
			}
		}
	}
	var core corev1.EventList
	if err := r.h.k8s.List(ctx, &core, client.InNamespace(r.ns)); err == nil {
		for _, e := range core.Items {
			if e.Reason == lockv1.ReasonTokenRegression {
				return true
			}
		}
	}
	return false
}
