// Package podsim stands in for the kubelet where none runs (envtest, the playground, the
// benchmarks): it creates candidate pods and writes their status in the sequences a real
// kubelet 1.37.2 was recorded writing (../shared/reference/real-node/evidence/*.txt;
// NOTES.md, "What a real kubelet and PodGC write"), never an idealised shortcut:
//
//   - a graceful deletion (GracefulExit) is the API server's deletionTimestamp, the
//     containers still reported running (only readiness turns False), then ONE update with
//     every container terminated and the terminal phase, then the kubelet's delete with
//     grace 0 (watch-e2e-web.txt rv 296..308; watch-e2e-fail.txt rv 333..343);
//   - an exited container (Exited) ends the pod only when its restartPolicy does not restart
//     it; otherwise the kubelet reports it terminated with the phase still Running, and
//     running again with restartCount+1 under the same UID (Restarted);
//   - PodGC, for a pod whose Node object was deleted (PodGC), writes phase Failed with
//     condition DisruptionTarget and the container statuses untouched, then force-deletes.
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
	// RestartPolicy of the pods it creates; default Always, the API server's default. It
	// decides what Exited writes.
	RestartPolicy corev1.RestartPolicy
	// ServiceAccount is the pods' spec.serviceAccountName (a token bound to a pod must name
	// it); empty leaves it unset.
	ServiceAccount string
	// PodIP, when set, gives each pod its status.podIP by name.
	PodIP func(name string) string
	// Node is the node the pods are bound to (spec.nodeName; no Node object is needed);
	// default "podsim". The API server deletes an unbound pod at once, without the graceful
	// deletion a kubelet takes part in.
	Node string
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

func (k *Kubelet) node() string {
	if k.Node == "" {
		return "podsim"
	}
	return k.Node
}

func (k *Kubelet) policy() corev1.RestartPolicy {
	if k.RestartPolicy == "" {
		return corev1.RestartPolicyAlways
	}
	return k.RestartPolicy
}

// CreateReadyPod creates a pod with one container and reports it Running and Ready.
func (k *Kubelet) CreateReadyPod(ctx context.Context, name string, labels map[string]string) (*corev1.Pod, error) {
	cname, image := k.container()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.Namespace, Labels: labels},
		Spec: corev1.PodSpec{NodeName: k.node(), RestartPolicy: k.policy(), ServiceAccountName: k.ServiceAccount,
			Containers: []corev1.Container{{Name: cname, Image: image}}},
	}
	p, err := k.Client.CoreV1().Pods(k.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %w", name, err)
	}
	return k.SetStatus(ctx, p, func(p *corev1.Pod) {
		now := metav1.Now()
		if k.PodIP != nil {
			if ip := k.PodIP(p.Name); ip != "" {
				p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
			}
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = conditions(true, true, now)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{running(cname, image, true, 0, now)}
	})
}

// restarts reports whether the kubelet restarts a container of a pod with this policy that
// exited with code.
func restarts(policy corev1.RestartPolicy, code int32) bool {
	return policy == corev1.RestartPolicyAlways || (policy == corev1.RestartPolicyOnFailure && code != 0)
}

// Exited reports that the pod's container exited with exitCode, as the kubelet does once it
// sees the exit. When the pod's restartPolicy does not restart it, that is ONE update: the
// container terminated and phase Succeeded (code 0) or Failed: attested termination. When
// it does (Always; OnFailure with a non-zero code), the container is reported terminated
// while the phase stays Running ("the container will be restarted soon",
// kubelet_pods.go): a crash awaiting restart, not attestation; call Restarted next.
func (k *Kubelet) Exited(ctx context.Context, p *corev1.Pod, exitCode int32) (*corev1.Pod, error) {
	return k.SetStatus(ctx, p, func(p *corev1.Pod) {
		now := metav1.Now()
		again := restarts(p.Spec.RestartPolicy, exitCode)
		p.Status.Phase = terminalPhase(exitCode)
		if again {
			p.Status.Phase = corev1.PodRunning
		}
		p.Status.Conditions = conditions(false, again, now)
		for i := range p.Status.ContainerStatuses {
			cs := &p.Status.ContainerStatuses[i]
			cs.Ready, cs.Started = false, ptrBool(false)
			cs.State = corev1.ContainerState{Terminated: terminated(exitCode, now)}
		}
	})
}

// Restarted reports the container of a crashed pod running again under the same UID, with
// restartCount+1 and the previous run as its last state; ready is what its readiness probe
// says (false until it first passes).
func (k *Kubelet) Restarted(ctx context.Context, p *corev1.Pod, ready bool) (*corev1.Pod, error) {
	return k.SetStatus(ctx, p, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = conditions(ready, true, now)
		for i := range p.Status.ContainerStatuses {
			cs := &p.Status.ContainerStatuses[i]
			last := cs.State
			*cs = running(cs.Name, cs.Image, ready, cs.RestartCount+1, now)
			cs.LastTerminationState = last
		}
	})
}

// GracefulExit is `kubectl delete pod` of a pod whose process exits 0 on SIGTERM, with the
// kubelet's part as recorded: the API server sets deletionTimestamp (grace 30 s); readiness
// turns False while the container still shows running; ONE update with the container
// terminated and phase Succeeded; the kubelet's final delete with grace 0.
func (k *Kubelet) GracefulExit(ctx context.Context, p *corev1.Pod) error {
	if err := k.Delete(ctx, p); err != nil {
		return err
	}
	return k.FinishDeletion(ctx, p, nil)
}

// Delete is the API server's part of `kubectl delete pod` of a pod bound to a node: it sets
// deletionTimestamp (grace 30 s) and leaves the pod for its kubelet to finish.
func (k *Kubelet) Delete(ctx context.Context, p *corev1.Pod) error {
	grace := int64(30)
	err := k.Client.CoreV1().Pods(k.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s: %w", p.Name, err)
	}
	return nil
}

// FinishDeletion is the kubelet's part of a graceful deletion, as recorded on a real node
// (../shared/reference/real-node/evidence/): readiness False while the container still shows
// running; stop (the container's process getting SIGTERM and exiting, nil for none); ONE
// update with the container terminated (exit 0) and phase Succeeded; the final delete with
// grace 0. A pod already gone is not an error.
func (k *Kubelet) FinishDeletion(ctx context.Context, p *corev1.Pod, stop func()) error {
	p, err := k.NotReady(ctx, p)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if stop != nil {
		stop()
	}
	if _, err := k.SetStatus(ctx, p, func(p *corev1.Pod) {
		now := metav1.Now()
		p.Status.Phase = corev1.PodSucceeded
		p.Status.Conditions = conditions(false, false, now)
		for i := range p.Status.ContainerStatuses {
			cs := &p.Status.ContainerStatuses[i]
			cs.Ready, cs.Started = false, ptrBool(false)
			cs.State = corev1.ContainerState{Terminated: terminated(0, now)}
		}
	}); err != nil {
		return err
	}
	return k.forceDelete(ctx, p)
}

// NotReady reports Ready=False with the container still running: what a failing readiness
// probe, the node controller for a lost node, or the kubelet while a deleted pod's
// containers stop reports. Nothing attests termination.
func (k *Kubelet) NotReady(ctx context.Context, p *corev1.Pod) (*corev1.Pod, error) {
	return k.SetStatus(ctx, p, func(p *corev1.Pod) {
		setCondition(p, corev1.PodReady, corev1.ConditionFalse)
		setCondition(p, corev1.ContainersReady, corev1.ConditionFalse)
		for i := range p.Status.ContainerStatuses {
			p.Status.ContainerStatuses[i].Ready = false
		}
	})
}

// PodGC does what PodGC does with a pod whose Node object was deleted: phase Failed with
// condition DisruptionTarget (reason DeletionByPodGC), the container statuses untouched
// (still running: the machine may be partitioned, not dead), then a force delete.
func (k *Kubelet) PodGC(ctx context.Context, p *corev1.Pod) error {
	p, err := k.SetStatus(ctx, p, func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
			Reason: "DeletionByPodGC", Message: "PodGC: node no longer exists", LastTransitionTime: metav1.Now()})
	})
	if err != nil {
		return err
	}
	return k.forceDelete(ctx, p)
}

func (k *Kubelet) forceDelete(ctx context.Context, p *corev1.Pod) error {
	zero := int64(0)
	err := k.Client.CoreV1().Pods(k.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s: %w", p.Name, err)
	}
	return nil
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
