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
	"github.com/lockwarden/lockwarden/test/chaos"
)

// Probe timing of the stand-in kubelet: a pod turns NotReady after failureThreshold
// failed probes in a row (about a second), as a kubelet with periodSeconds and
// failureThreshold would, only faster.
const (
	probePeriod      = 200 * time.Millisecond
	probeTimeout     = 300 * time.Millisecond
	failureThreshold = 3
	// defaultRestartDelay is how long a crashed container stays terminated before the
	// kubelet starts it again (the first restart has no back-off; starting takes a moment).
	defaultRestartDelay = 300 * time.Millisecond
)

// workerProc is one chaosworker process playing one pod (one UID): one incarnation of the
// worker container.
type workerProc struct {
	p         *proc
	pod       string
	uid       string
	container string // its containerID (podstatus.go: newContainerID)
	probe     string // host:port of its /readyz and stall hook
	history   string // its history file

	mu sync.Mutex
	// readyAt is when the kubelet first reported this container Ready (CLOCK_MONOTONIC ns).
	readyAt int64
}

// reportedReady records the kubelet's first Ready report of w's container.
func (w *workerProc) reportedReady(at int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.readyAt == 0 {
		w.readyAt = at
	}
}

// firstReady is when the kubelet first reported w Ready, 0 if never.
func (w *workerProc) firstReady() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.readyAt
}

// slot is one candidate pod name with the process that plays its worker container, as a
// kubelet sees it. Its API server proxy is the path of every worker that plays it.
type slot struct {
	name string
	node string // the Node object its pods run on
	api  *apiproxy.Proxy
	kcfg string // kubeconfig through api

	mu       sync.Mutex
	pod      *corev1.Pod // nil while deleted
	w        *workerProc
	app      string // a sidecar pod's main container's containerID
	ip       string // the pod's IP (status.podIP)
	reported string // "ready", "notready", "crashed", "terminated": what status says
	fails    int
	restarts int32
	started  metav1.Time
	last     *corev1.ContainerStateTerminated
	// deleting: a deletion or PodGC owns the pod; the probe loop leaves it alone.
	deleting bool
	// silent: the node is partitioned; its kubelet writes nothing.
	silent bool
	// unready: the readiness probe is made to fail.
	unready      bool
	restartDelay time.Duration
	flapTill     time.Time
	flapStep     time.Duration
	flapFrom     time.Time
}

// state returns what the kubelet knows of the worker's container; s.mu is held.
func (s *slot) state(ready bool) workerState {
	st := workerState{ready: ready, restarts: s.restarts, started: s.started, last: s.last, app: s.app, ip: s.ip}
	if s.w != nil {
		st.id = s.w.container
	}
	return st
}

// kubelet sets the status of the run's pods from their workers' real state.
type kubelet struct {
	cs    *kubernetes.Clientset
	ns    string
	shape podShape
	slots []*slot
	http  *http.Client
	// restart starts a new worker process for the slot's pod (same UID), as the kubelet
	// restarts a container.
	restart func(ctx context.Context, s *slot, pod *corev1.Pod) (*workerProc, error)
	// reported, if set, is told each state the probe loop wrote to a pod's status ("ready",
	// "notready", "terminated"): the global mode's timeline.
	reported func(s *slot, pod *corev1.Pod, want string)
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
		pod, w, skip := s.pod, s.w, s.deleting || s.silent
		s.mu.Unlock()
		if pod == nil || skip {
			continue
		}
		if (w == nil || !w.p.running()) && k.shape.restarts() {
			k.crash(ctx, s, pod, w)
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
			if want == "ready" && w != nil {
				w.reportedReady(chaos.Mono())
			}
			if k.reported != nil {
				k.reported(s, pod, want)
			}
		}
	}
}

// crash is the kubelet's answer to a worker container that exited when it restarts it:
// report it terminated with the phase still Running, restart it under the same UID, and
// let the next probe report it running with restartCount+1.
func (k *kubelet) crash(ctx context.Context, s *slot, pod *corev1.Pod, w *workerProc) {
	code, id := int32(137), ""
	if w != nil {
		code, id = int32(w.p.exitCode()), w.container
	}
	now := metav1.Now()
	s.mu.Lock()
	st, delay := s.state(false), s.restartDelay
	s.mu.Unlock()
	if delay == 0 {
		delay = defaultRestartDelay
	}
	if err := k.setStatus(ctx, pod, func(p *corev1.Pod) { p.Status = crashedStatus(p.Status, k.shape, st, code, now) }); err != nil {
		return // the next tick tries again
	}
	s.mu.Lock()
	s.reported = "crashed"
	s.mu.Unlock()
	sleepCtx(ctx, delay)
	s.mu.Lock()
	gone := s.deleting || s.pod != pod || ctx.Err() != nil
	s.mu.Unlock()
	if gone {
		return
	}
	nw, err := k.restart(ctx, s, pod)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleting || s.pod != pod {
		go nw.p.stop(5 * time.Second) // deleted meanwhile: the kubelet kills what it started
		return
	}
	s.w, s.restarts, s.started, s.last = nw, s.restarts+1, metav1.Now(), terminated(code, now, id)
	s.reported, s.fails, s.restartDelay = "", 0, 0
}

// judge decides what the pod's status should say now.
func (k *kubelet) judge(ctx context.Context, s *slot, w *workerProc) string {
	if w == nil || !w.p.running() {
		return "terminated"
	}
	ok := k.probe(ctx, w.probe)
	s.mu.Lock()
	defer s.mu.Unlock()
	if ok && !s.unready {
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

// report writes the pod status for want: running (Ready or not), or, for a worker that
// exited in a pod that does not restart it, the one terminal update.
func (k *kubelet) report(ctx context.Context, s *slot, pod *corev1.Pod, want string, w *workerProc) error {
	now := metav1.Now()
	s.mu.Lock()
	st := s.state(want == "ready")
	s.mu.Unlock()
	return k.setStatus(ctx, pod, func(p *corev1.Pod) {
		if want == "terminated" {
			code := int32(137)
			if w != nil && !w.p.running() {
				code = int32(w.p.exitCode())
			}
			p.Status = terminalStatus(p.Status, k.shape, st, code, now)
			return
		}
		p.Status = runningStatus(p.Status, k.shape, st, now)
	})
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
