package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// kubelet stands in for the kubelet no envtest runs: it creates candidate pods and sets their
// status as a kubelet would report it.
type kubelet struct {
	cs kubernetes.Interface
	ns string
}

// createReadyPod creates a pod with one container and reports it Running and Ready.
func (k *kubelet) createReadyPod(ctx context.Context, name string, labels map[string]string) (*corev1.Pod, error) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.ns, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
	}
	p, err := k.cs.CoreV1().Pods(k.ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %w", name, err)
	}
	return k.setStatus(ctx, p, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Ready: true, Image: "example.invalid/app",
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	})
}

// exited reports the pod's only container terminated (the process is gone), as the kubelet
// does once it sees the exit: attested termination.
func (k *kubelet) exited(ctx context.Context, p *corev1.Pod, exitCode int32) (*corev1.Pod, error) {
	return k.setStatus(ctx, p, func(p *corev1.Pod) {
		now := metav1.Now()
		if exitCode == 0 {
			p.Status.Phase = corev1.PodSucceeded
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "example.invalid/app",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, FinishedAt: now}}}}
	})
}

// gracefulExit is a graceful exit: container terminated with code 0, then the pod deleted.
func (k *kubelet) gracefulExit(ctx context.Context, p *corev1.Pod) error {
	if _, err := k.exited(ctx, p, 0); err != nil {
		return err
	}
	zero := int64(0)
	if err := k.cs.CoreV1().Pods(k.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s: %w", p.Name, err)
	}
	return nil
}

// notReady reports Ready=False with the container still running: what a failing readiness
// probe, or the node controller for a lost node, reports. Nothing attests termination.
func (k *kubelet) notReady(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	return k.setStatus(ctx, p, func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].Ready = false
		}
	})
}

func (k *kubelet) setStatus(ctx context.Context, p *corev1.Pod, mutate func(*corev1.Pod)) (*corev1.Pod, error) {
	cur := p.DeepCopy()
	for range 10 {
		mutate(cur)
		updated, err := k.cs.CoreV1().Pods(k.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			return updated, nil
		}
		if !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("update pod %s status: %w", p.Name, err)
		}
		if cur, err = k.cs.CoreV1().Pods(k.ns).Get(ctx, p.Name, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("get pod %s: %w", p.Name, err)
		}
	}
	return nil, fmt.Errorf("update pod %s status: too many conflicts", p.Name)
}
