// Package podsim stands in for the kubelet where none runs (envtest, the playground, the
// benchmarks): it creates candidate pods and reports their status as a kubelet would.
package podsim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Kubelet creates pods in Namespace and writes their status.
type Kubelet struct {
	// Client reaches the API server.
	Client kubernetes.Interface
	// Namespace holds the pods.
	Namespace string
	// Container and Image name the pods' one container; defaults "app" and
	// "example.invalid/app".
	Container, Image string
}

func (k *Kubelet) container() (name, image string) {
	name, image = k.Container, k.Image
	if name == "" {
		name = "app"
	}
	if image == "" {
		image = "example.invalid/app"
	}
	return name, image
}

// CreateReadyPod creates a pod with one container and reports it Running and Ready.
func (k *Kubelet) CreateReadyPod(ctx context.Context, name string, labels map[string]string) (*corev1.Pod, error) {
	cname, image := k.container()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.Namespace, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: cname, Image: image}}},
	}
	p, err := k.Client.CoreV1().Pods(k.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %w", name, err)
	}
	return k.SetStatus(ctx, p, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: cname, Ready: true, Image: image,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
	})
}

// Exited reports the pod's only container terminated (the process is gone), as the kubelet
// does once it sees the exit: attested termination. The pod phase becomes Succeeded for
// exit code 0 and Failed otherwise.
func (k *Kubelet) Exited(ctx context.Context, p *corev1.Pod, exitCode int32) (*corev1.Pod, error) {
	cname, image := k.container()
	return k.SetStatus(ctx, p, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodSucceeded
		if exitCode != 0 {
			p.Status.Phase = corev1.PodFailed
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: cname, Image: image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, FinishedAt: now}}}}
	})
}

// GracefulExit is a graceful exit: the container terminated with code 0, then the pod
// deleted.
func (k *Kubelet) GracefulExit(ctx context.Context, p *corev1.Pod) error {
	if _, err := k.Exited(ctx, p, 0); err != nil {
		return err
	}
	zero := int64(0)
	if err := k.Client.CoreV1().Pods(k.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s: %w", p.Name, err)
	}
	return nil
}

// NotReady reports Ready=False with the container still running: what a failing readiness
// probe, or the node controller for a lost node, reports. Nothing attests termination.
func (k *Kubelet) NotReady(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	return k.SetStatus(ctx, p, func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.Now()}}
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].Ready = false
		}
	})
}

// SetStatus applies mutate to the pod's status and writes it, re-reading on conflicts.
func (k *Kubelet) SetStatus(ctx context.Context, p *corev1.Pod, mutate func(*corev1.Pod)) (*corev1.Pod, error) {
	cur := p.DeepCopy()
	for range 10 {
		mutate(cur)
		updated, err := k.Client.CoreV1().Pods(k.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			return updated, nil
		}
		if !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("update pod %s status: %w", p.Name, err)
		}
		if cur, err = k.Client.CoreV1().Pods(k.Namespace).Get(ctx, p.Name, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("get pod %s: %w", p.Name, err)
		}
	}
	return nil, fmt.Errorf("update pod %s status: too many conflicts", p.Name)
}
