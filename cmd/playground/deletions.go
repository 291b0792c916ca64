package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// deletions plays the kubelet's part when a worker's pod is deleted, by the demo or by a user's
// `kubectl delete pod`: the playground's pods are bound to a stand-in node, so the API server
// only sets deletionTimestamp and waits for the kubelet. The stand-in then writes what a real
// kubelet was recorded writing (internal/podsim FinishDeletion): Ready=False while the
// container still runs, SIGTERM to the worker and its exit, one update with the container
// terminated and phase Succeeded, the final delete.
type deletions struct {
	p       *playground
	mu      sync.Mutex
	handled map[string]bool      // by pod UID
	done    map[string]time.Time // by pod name: when the terminal update was written
	wg      sync.WaitGroup
}

// run watches the playground's pods until ctx ends, then waits for deletions in progress.
func (d *deletions) run(ctx context.Context) {
	defer d.wg.Wait()
	for ctx.Err() == nil {
		w, err := d.p.clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		d.consume(ctx, w)
		w.Stop()
	}
}

func (d *deletions) consume(ctx context.Context, w watch.Interface) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			pod, isPod := ev.Object.(*corev1.Pod)
			if !isPod || pod.DeletionTimestamp == nil || ev.Type == watch.Deleted {
				continue
			}
			d.start(ctx, pod)
		}
	}
}

// start finishes pod's deletion once, in its own goroutine.
func (d *deletions) start(ctx context.Context, pod *corev1.Pod) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.handled[string(pod.UID)] {
		return
	}
	d.handled[string(pod.UID)] = true
	d.wg.Go(func() {
		stop := func() {}
		if w := d.p.worker(pod.Name); w != nil {
			stop = func() { w.stop(10 * time.Second) }
		}
		if err := d.p.kubelet.FinishDeletion(ctx, pod, func() { stop(); d.finished(pod.Name) }); err != nil && ctx.Err() == nil {
			d.p.say("stand-in kubelet: finish deleting %s: %v", pod.Name, err)
		}
	})
}

func (d *deletions) finished(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.done[name] = time.Now()
}

// waitFinished waits until the stand-in kubelet has stopped the named pod's worker and
// reports when (the terminal update follows at once).
func (d *deletions) waitFinished(ctx context.Context, name string, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		d.mu.Lock()
		at, ok := d.done[name]
		d.mu.Unlock()
		if ok {
			return at, nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("the stand-in kubelet did not finish deleting %s within %v", name, timeout)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
