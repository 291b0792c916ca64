package main

import (
	"context"
	"time"

	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// kubeletFault injects the faults in which the kubelet or PodGC writes a state that is not
// proof that the holder stopped (podstatus.go cites what each writes). The controller must
// take the slow path (Releasing, then the delay) for each; the handoff checker fails a run in
// which it ended the term while a process of the holder ran, or started again.
func (r *run) kubeletFault(ctx context.Context, f chaos.Fault) (healFunc, error) {
	s := r.holderSlot(ctx)
	switch f.Kind {
	case chaos.CrashRestart:
		// The worker dies; the kubelet reports its container terminated with the phase still
		// Running, restarts it after f.Jitter under the same UID, and reports it running with
		// restartCount+1 (kubelet.crash). No heal: the restarted worker stays.
		w := s.worker()
		if w == nil || !r.kubelet.shape.restarts() {
			r.note("crash-restart: no worker, or pods that are not restarted")
			return nothing, nil
		}
		s.mu.Lock()
		s.restartDelay = f.Jitter
		s.mu.Unlock()
		w.p.kill()
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
