package main

import (
	"context"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// crash is one crash-restart fault as injected: the killed worker, the token its pod held.
type crash struct {
	old   *workerProc
	token int64
	proof bool
}

// restarts turns the run's crashes into chaos.Restart records: when the old process exited,
// when the kubelet first reported the process that restarted it Ready, and whether that one
// abandoned the old token (hs are the histories, in the order of r.workers).
func (r *run) restarts(hs []chaos.WorkerHistory) []chaos.Restart {
	r.mu.Lock()
	crashes := append([]crash(nil), r.crashes...)
	workers := append([]*workerProc(nil), r.workers...)
	r.mu.Unlock()
	var out []chaos.Restart
	for _, c := range crashes {
		<-c.old.p.exited
		rs := chaos.Restart{UID: c.old.uid, Pod: c.old.pod, Token: c.token, Proof: c.proof, Crash: c.old.p.exitedAt}
		for i, w := range workers {
			if w.uid != c.old.uid || w.p.startedAt < rs.Crash {
				continue
			}
			rs.Ready = w.firstReady()
			for _, e := range hs[i].Events {
				rs.Abandoned = rs.Abandoned || (e.Kind == chaos.EvAbandon && e.Token == c.token)
			}
			break
		}
		out = append(out, rs)
	}
	return out
}

// kubeletFault injects the faults in which the kubelet or PodGC writes a state that is not
// proof that the holder stopped (podstatus.go cites what each writes). The controller must
// take the slow path (Releasing, then the delay) for each; the handoff checker fails a run in
// which it ended the term while a process of the holder ran, or started again.
func (r *run) kubeletFault(ctx context.Context, f chaos.Fault) (healFunc, error) {
	s := r.holderSlot(ctx)
	switch f.Kind {
	case chaos.CrashRestart, chaos.CrashRestartSidecar:
		// The worker dies; the kubelet reports its container terminated with the phase still
		// Running, restarts it after f.Jitter under the same UID, and reports it running with
		// a new containerID and restartCount+1 (kubelet.crash). CheckRestarts then holds the
		// controller to the rule of the pod's shape: with proof (crash-restart, one container)
		// the same pod gets a new token at once; without (crash-restart-sidecar) Releasing and
		// the full delay. No heal: the restarted worker stays.
		w := s.worker()
		if w == nil || !r.kubelet.shape.restarts() {
			r.note("%s: no worker, or pods that are not restarted", f.Kind)
			return nothing, nil
		}
		var token int64
		if l, err := r.getLock(ctx); err == nil && string(l.Status.HolderUID) == w.uid &&
			(l.Status.Phase == lockv1.PhaseHeld || l.Status.Phase == lockv1.PhaseReleasing) {
			token = l.Status.FencingToken
		}
		s.mu.Lock()
		s.restartDelay = f.Jitter
		s.mu.Unlock()
		w.p.kill()
		r.mu.Lock()
		r.crashes = append(r.crashes, crash{old: w, token: token, proof: r.kubelet.shape.proof()})
		r.mu.Unlock()
		r.note("%s: killed %s (token %d, restart proof %v)", f.Kind, w.p.name, token, r.kubelet.shape.proof())
		return nothing, nil

	case chaos.SidecarDelete:
		// A graceful deletion of a pod whose worker is a native sidecar: the main container
		// stops first and the sidecar keeps running for f.Hold, still leading, before the
		// kubelet stops it too.
		if !r.kubelet.shape.sidecar {
			r.note("sidecar-delete: the run's pods have no sidecar")
			return nothing, nil
		}
		if err := r.kubelet.gracefulDelete(ctx, s, deleteOpts{sidecarLast: f.Hold}); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return r.startPod(ctx, s) }, nil

	case chaos.NodePodGC:
		// The holder's node is partitioned (its pods cannot reach the API server, its kubelet
		// writes nothing) and its Node object deleted: PodGC marks the pod Failed with the
		// containers still running and force-deletes it. The worker keeps running.
		w := s.worker()
		s.mu.Lock()
		s.silent = true
		s.mu.Unlock()
		s.api.SetMode(apiproxy.Hold)
		if err := r.kubelet.podGC(ctx, s); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			// The node comes back; its kubelet kills the containers of a pod the API server no
			// longer has, then registers the node again.
			if w != nil {
				w.p.stop(5 * time.Second)
			}
			s.api.SetMode(apiproxy.Pass)
			s.mu.Lock()
			s.silent = false
			s.mu.Unlock()
			if err := r.kubelet.createNode(ctx, s); err != nil {
				return err
			}
			return r.startPod(ctx, s)
		}, nil
	}
	return nothing, nil
}
