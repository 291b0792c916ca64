package main

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/lockwarden/lockwarden/test/chaos"
)

// inject runs the schedule: each fault after its gap on the cluster holding the term, held,
// healed, then liveness checked on the shared ledger.
func (r *grun) inject(ctx context.Context) error {
	for _, f := range r.sched.Faults {
		sleepCtx(ctx, f.Gap)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		holder, token, uid := r.holder(ctx)
		mark := faultMark{Kind: f.Kind, Holder: holder, Token: token, At: chaos.Mono()}
		r.note("inject %s for %v (holder cluster %q, token %d, pod %s)", f.Kind, f.Hold.Round(time.Millisecond), holder, token, uid)
		heal, acted, err := r.fault(ctx, f, holder, uid)
		if err != nil {
			return fmt.Errorf("inject %s: %w", f.Kind, err)
		}
		if acted {
			r.faults[f.Kind]++
		} else {
			mark.Skipped = true
			r.note("%s found nothing to act on", f.Kind)
		}
		sleepCtx(ctx, f.Hold)
		if err := heal(ctx); err != nil {
			return fmt.Errorf("heal %s: %w", f.Kind, err)
		}
		mark.Healed = chaos.Mono()
		r.mu.Lock()
		r.marks = append(r.marks, mark)
		r.mu.Unlock()
		r.note("healed %s", f.Kind)
		if err := r.checkLiveness(ctx, mark); err != nil {
			return err
		}
	}
	return nil
}

// checkLiveness waits, after a heal, for a write on the shared ledger: for a fault that
// ended the holder's term one under a token above the term's (a new term, in either
// cluster, perhaps made before the heal), else any new one; past the bound it is a violation.
// A manager killed for less than the grant's lease may come back and go on with the same
// term: after a kill, a round published after the heal for the term's token, Held, followed
// by a write, is recovery too.
func (r *grun) checkLiveness(ctx context.Context, m faultMark) error {
	bound := r.g.livenessBound()
	if !chaos.EndsTerm(m.Kind) || m.Skipped {
		took, vs, err := r.clusters[0].r.recovery(ctx, bound)
		return r.recovered(m.Kind, took, vs, err)
	}
	healed := chaos.Mono()
	holder := r.cluster(m.Holder)
	var heldRound int64
	if holder != nil {
		heldRound = holder.lastRound(m.Token, healed)
	}
	var progressed int64
	deadline := time.Now().Add(bound + 5*time.Second)
	for ; time.Now().Before(deadline) && ctx.Err() == nil; sleepCtx(ctx, 50*time.Millisecond) {
		var outs []chaos.Outcome
		if err := getJSON(ctx, r.ledgerURL+"/outcomes", 5*time.Second, &outs); err == nil && chaos.AcceptedAbove(outs, m.Token) {
			progressed = chaos.Mono()
			break
		}
		if m.Kind == chaos.GlobalManagerKill && holder != nil && holder.lastRound(m.Token, chaos.Mono()) > heldRound {
			r.note("%s's term %d goes on: a round after the heal", holder.name, m.Token)
			if at, err := holder.r.waitProgress(ctx, time.Until(deadline)); err == nil {
				progressed = at
			}
			break
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	vs := chaos.CheckLiveness(healed, progressed, bound)
	if len(vs) > 0 {
		vs[0].Detail = fmt.Sprintf("no write under a token above %d: %s", m.Token, vs[0].Detail)
	}
	return r.recovered(m.Kind, time.Duration(progressed-healed), vs, nil)
}

// recovered records a liveness check's outcome.
func (r *grun) recovered(kind string, took time.Duration, vs []chaos.Violation, err error) error {
	if err != nil {
		return err
	}
	if len(vs) > 0 {
		r.violate("liveness", "after %s: %s", kind, vs[0].Detail)
		return nil
	}
	r.mu.Lock()
	r.liveness = append(r.liveness, took)
	r.mu.Unlock()
	return nil
}

// holder returns the cluster whose status claims the term (globalHolderUID set under its own
// name), with its token and holder pod's UID; with two claims (a term moving) the higher
// token's; "" when neither claims one.
func (r *grun) holder(ctx context.Context) (cluster string, token int64, uid string) {
	for _, c := range r.clusters {
		st, err := c.status(ctx)
		if err != nil || st.GlobalHolderUID == "" || st.GlobalCluster != c.name {
			continue
		}
		if tok := max(st.FencingToken, st.GlobalToken); tok > token {
			cluster, token, uid = c.name, tok, string(st.GlobalHolderUID)
		}
	}
	return cluster, token, uid
}

// fault injects f on the holder cluster (east when none claims the term) and returns what
// heals it, and whether it found something to act on.
func (r *grun) fault(ctx context.Context, f chaos.Fault, holder, uid string) (healFunc, bool, error) {
	c := r.cluster(holder)
	if c == nil {
		c = r.clusters[0]
	}
	switch f.Kind {
	case chaos.GlobalManagerKill:
		c.mgr.halt()
		return func(context.Context) error { c.mgr.resume(); return nil }, true, nil

	case chaos.GlobalManagerCut:
		c.mgr.cut()
		return func(context.Context) error { c.mgr.heal(); return nil }, true, nil

	case chaos.GlobalPodDelete:
		s := c.holderSlot(uid)
		if s == nil {
			return nothing, false, nil
		}
		if err := c.r.kubelet.gracefulDelete(ctx, s, deleteOpts{}); err != nil {
			return nil, false, err
		}
		return func(ctx context.Context) error { return c.r.startPod(ctx, s) }, true, nil

	case chaos.GlobalEtcdMemberKill:
		e := r.g.h.etcd
		i := f.Member
		if f.Member == 0 { // member 0 stands for "the leader"
			if l := e.leader(ctx); l >= 0 {
				i = l
			}
		}
		m := e.members[i]
		r.note("killing etcd member %s", m.name)
		e.kill(m)
		return func(context.Context) error { return e.restart(m) }, true, nil

	case chaos.GlobalWorkerPause:
		s := c.holderSlot(uid)
		if s == nil {
			return nothing, false, nil
		}
		w := s.worker()
		if w == nil {
			return nothing, false, nil
		}
		w.p.signal(syscall.SIGSTOP)
		return func(context.Context) error { w.p.signal(syscall.SIGCONT); return nil }, true, nil
	}
	return nil, false, fmt.Errorf("unknown global fault kind %q", f.Kind)
}
