package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// kubelet stands in for the kubelet no playground runs: it creates candidate pods and sets
// their status from the state of the local processes that play their containers.
type kubelet struct {
	cs *kubernetes.Clientset
	ns string
}

// createPod creates a pod with one container and reports it Running and Ready.
func (k *kubelet) createPod(ctx context.Context, name string, labels map[string]string) (*corev1.Pod, error) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "fenced-worker:dev"}}},
	}
	p, err := k.cs.CoreV1().Pods(k.ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %w", name, err)
	}
	return k.setStatus(ctx, p, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", Ready: true, Image: "fenced-worker:dev",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	})
}

// terminated reports the pod's container exited, then deletes the pod: what a kubelet does
// on a graceful exit.
func (k *kubelet) terminated(ctx context.Context, p *corev1.Pod, exitCode int32) error {
	if _, err := k.setStatus(ctx, p, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodSucceeded
		if exitCode != 0 {
			p.Status.Phase = corev1.PodFailed
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", Image: "fenced-worker:dev",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, FinishedAt: now}}}}
	}); err != nil {
		return err
	}
	zero := int64(0)
	if err := k.cs.CoreV1().Pods(k.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s: %w", p.Name, err)
	}
	return nil
}

func (k *kubelet) setStatus(ctx context.Context, p *corev1.Pod, mutate func(*corev1.Pod)) (*corev1.Pod, error) {
	for range 5 {
		cur, err := k.cs.CoreV1().Pods(k.ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get pod %s: %w", p.Name, err)
		}
		mutate(cur)
		updated, err := k.cs.CoreV1().Pods(k.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			return updated, nil
		}
		if !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("update pod %s status: %w", p.Name, err)
		}
	}
	return nil, fmt.Errorf("update pod %s status: too many conflicts", p.Name)
}
