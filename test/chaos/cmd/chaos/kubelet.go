package main

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/lockwarden/lockwarden/internal/apiproxy"
)

// Probe timing of the stand-in kubelet: a pod turns NotReady after failureThreshold
// failed probes in a row (about a second), as a kubelet with periodSeconds and
// failureThreshold would, only faster.
const (
	probePeriod      = 200 * time.Millisecond
	probeTimeout     = 300 * time.Millisecond
	failureThreshold = 3
)

// workerProc is one chaosworker process playing one pod (one UID).
type workerProc struct {
	p       *proc
	pod     string
	uid     string
	probe   string // host:port of its /readyz
	history string // its history file
}

// slot is one candidate pod name with the process that plays its container, as a kubelet
// sees it. Its API server proxy is the path of every worker that plays it.
type slot struct {
	name string
	api  *apiproxy.Proxy
	kcfg string // kubeconfig through api

	mu       sync.Mutex
	pod      *corev1.Pod // nil while deleted
	w        *workerProc
	reported string // "ready", "notready", "terminated": what status says
	fails    int
	flapTill time.Time
	flapStep time.Duration
	flapFrom time.Time
}

// kubelet sets the status of the run's pods from their workers' real state.
type kubelet struct {
	cs    *kubernetes.Clientset
	ns    string
	slots []*slot
	http  *http.Client
}

// run probes every slot until ctx ends.
func (k *kubelet) run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, s := range k.slots {
		wg.Go(func() { k.loop(ctx, s) })
	}
	wg.Wait()
}

func (k *kubelet) loop(ctx context.Context, s *slot) {
	t := time.NewTicker(probePeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.mu.Lock()
		pod, w := s.pod, s.w
		s.mu.Unlock()
		if pod == nil {
			continue
		}
		want := k.judge(ctx, s, w)
		s.mu.Lock()
		same := want == s.reported
		s.mu.Unlock()
		if same {
			continue
		}
		if err := k.report(ctx, s, pod, want, w); err == nil {
			s.mu.Lock()
			if s.pod == pod {
				s.reported = want
			}
			s.mu.Unlock()
		}
	}
}

// judge decides what the pod's status should say now.
func (k *kubelet) judge(ctx context.Context, s *slot, w *workerProc) string {
	if w == nil || !w.p.running() {
		return "terminated"
	}
	ok := k.probe(ctx, w.probe)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok {
		s.fails = 0
	} else {
		s.fails++
	}
	want := "ready"
	if s.fails >= failureThreshold || (s.reported == "notready" && s.fails > 0) {
		want = "notready"
	}
	if now := time.Now(); now.Before(s.flapTill) && s.flapStep > 0 {
		if (now.Sub(s.flapFrom)/s.flapStep)%2 == 0 {
			want = "notready"
		}
	}
	return want
}

func (k *kubelet) probe(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
	if err != nil {
		return false
	}
	resp, err := k.http.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// report writes the pod status for want.
func (k *kubelet) report(ctx context.Context, s *slot, pod *corev1.Pod, want string, w *workerProc) error {
	return k.setStatus(ctx, pod, func(p *corev1.Pod) {
		now := metav1.Now()
		switch want {
		case "terminated":
			code := int32(137)
			if w != nil && !w.p.running() {
				code = int32(w.p.exitCode())
			}
			p.Status.Phase = corev1.PodFailed
			if code == 0 {
				p.Status.Phase = corev1.PodSucceeded
			}
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", Image: "chaosworker:dev",
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: now}}}}
		default:
			ready := corev1.ConditionTrue
			if want != "ready" {
				ready = corev1.ConditionFalse
			}
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: ready, LastTransitionTime: now}}
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "worker", Ready: ready == corev1.ConditionTrue, Image: "chaosworker:dev",
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}}
		}
	})
}

// createPod creates the slot's pod (a new UID) and reports it Running but not yet Ready.
func (k *kubelet) createPod(ctx context.Context, s *slot, labels map[string]string) (*corev1.Pod, error) {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: k.ns, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "chaosworker:dev"}}},
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

// deletePod force-deletes the slot's pod object (grace 0), as `kubectl delete --force` does.
func (k *kubelet) deletePod(ctx context.Context, s *slot) error {
	s.mu.Lock()
	pod := s.pod
	s.pod, s.reported, s.fails = nil, "", 0
	s.mu.Unlock()
	if pod == nil {
		return nil
	}
	zero := int64(0)
	err := k.cs.CoreV1().Pods(k.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete pod %s: %w", pod.Name, err)
	}
	return nil
}

func (k *kubelet) setStatus(ctx context.Context, p *corev1.Pod, mutate func(*corev1.Pod)) error {
	for range 5 {
		cur, err := k.cs.CoreV1().Pods(k.ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("get pod %s: %w", p.Name, err)
		}
		if cur.UID != p.UID {
			return fmt.Errorf("pod %s was replaced", p.Name)
		}
		mutate(cur)
		_, err = k.cs.CoreV1().Pods(k.ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("update pod %s status: %w", p.Name, err)
		}
	}
	return fmt.Errorf("update pod %s status: too many conflicts", p.Name)
}
