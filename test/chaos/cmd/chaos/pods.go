package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// createPod creates the slot's pod (a new UID) on the slot's node; the probe loop then
// reports it running.
func (k *kubelet) createPod(ctx context.Context, s *slot, labels map[string]string) (*corev1.Pod, error) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: k.ns, Labels: labels},
		Spec:       k.shape.spec(s.node),
	}
	for {
		created, err := k.cs.CoreV1().Pods(k.ns).Create(ctx, p, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // the old object is still going
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("create pod %s: %w", s.name, err)
		}
		return created, nil
	}
}

// take hands the slot's pod to a deletion: the probe loop leaves it alone from now on.
func (s *slot) take() (*corev1.Pod, *workerProc, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pod == nil || s.deleting {
		return nil, nil, ""
	}
	s.deleting = true
	return s.pod, s.w, s.reported
}

// gone records that the slot's pod object is deleted.
func (s *slot) gone() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pod, s.reported, s.fails, s.deleting, s.unready = nil, "", 0, false, false
	s.restarts, s.last, s.restartDelay = 0, nil, 0
}

// deleteOpts adjust a graceful deletion.
type deleteOpts struct {
	// sidecarLast: how long a sidecar worker keeps running after the main container stopped.
	sidecarLast time.Duration
	// beforeTerminal runs just before the terminal update, the moment the controller may
	// grant the next holder.
	beforeTerminal func()
}

// gracefulDelete is `kubectl delete pod` of the slot's pod, with the kubelet's part as it was
// recorded (podstatus.go): the API server sets deletionTimestamp; readiness turns False while
// the worker still runs; a sidecar pod's main container stops first; the worker gets SIGTERM;
// ONE update with every container terminated and the terminal phase; the final delete.
func (k *kubelet) gracefulDelete(ctx context.Context, s *slot, o deleteOpts) error {
	pod, w, reported := s.take()
	if pod == nil {
		return nil
	}
	defer s.gone()
	err := k.cs.CoreV1().Pods(k.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(30)), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	s.mu.Lock()
	st := s.state(false)
	s.mu.Unlock()
	if w != nil && w.p.running() {
		now := metav1.Now()
		if err := k.setStatus(ctx, pod, func(p *corev1.Pod) { p.Status = runningStatus(p.Status, k.shape, st, now) }); err != nil {
			return err
		}
		if k.shape.sidecar {
			st.ready = true // the sidecar's own probe still passes
			if err := k.setStatus(ctx, pod, func(p *corev1.Pod) { p.Status = mainStoppedStatus(p.Status, k.shape, st, now) }); err != nil {
				return err
			}
			sleepCtx(ctx, o.sidecarLast)
		}
	}
	code := int32(137)
	if w != nil {
		w.p.stop(5 * time.Second)
		code = int32(w.p.exitCode())
	}
	if o.beforeTerminal != nil {
		o.beforeTerminal()
	}
	if reported != "terminated" {
		now := metav1.Now()
		if err := k.setStatus(ctx, pod, func(p *corev1.Pod) { p.Status = terminalStatus(p.Status, k.shape, st, code, now) }); err != nil {
			return err
		}
	}
	return k.finalDelete(ctx, pod)
}

// finalDelete is the delete with grace 0 that removes the object (the kubelet's last act,
// `kubectl delete --force`, and PodGC's).
func (k *kubelet) finalDelete(ctx context.Context, pod *corev1.Pod) error {
	err := k.cs.CoreV1().Pods(k.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0)), Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	return nil
}

// forceDelete force-deletes the slot's pod object (grace 0), as `kubectl delete --force`
// does: no kubelet takes part, the worker keeps running.
func (k *kubelet) forceDelete(ctx context.Context, s *slot) error {
	pod, _, _ := s.take()
	if pod == nil {
		return nil
	}
	defer s.gone()
	return k.finalDelete(ctx, pod)
}

// podGC deletes the slot's Node object and does what PodGC does with a pod on a deleted
// node (pkg/controller/podgc, after its quarantine, here at once): phase Failed with
// condition DisruptionTarget, the container statuses untouched, then a force delete. The
// worker keeps running.
func (k *kubelet) podGC(ctx context.Context, s *slot) error {
	pod, _, _ := s.take()
	if pod == nil {
		return nil
	}
	defer s.gone()
	if err := k.cs.CoreV1().Nodes().Delete(ctx, s.node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete node %s: %w", s.node, err)
	}
	now := metav1.Now()
	if err := k.setStatus(ctx, pod, func(p *corev1.Pod) { p.Status = podGCStatus(p.Status, now) }); err != nil {
		return err
	}
	return k.finalDelete(ctx, pod)
}

// createNode creates the slot's Node object (no kubelet runs behind it).
func (k *kubelet) createNode(ctx context.Context, s *slot) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.node, Labels: map[string]string{"chaos-run": k.ns}}}
	if _, err := k.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create node %s: %w", s.node, err)
	}
	return nil
}

// deleteNodes removes the run's Node objects.
func (k *kubelet) deleteNodes(ctx context.Context) error {
	err := k.cs.CoreV1().Nodes().DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "chaos-run=" + k.ns})
	if err != nil {
		return fmt.Errorf("delete nodes of %s: %w", k.ns, err)
	}
	return nil
}
