package main

import (
	"context"
	"fmt"
	"github.com/lockwarden/lockwarden/internal/podsim"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// timing is a client-go LeaseDuration/RenewDeadline/RetryPeriod triple; lockwarden's locks
// in the same comparison get leaseDurationSeconds = lease.
type timing struct {
	lease, renew, retry time.Duration
}

func (t timing) String() string {
	return fmt.Sprintf("%d/%d/%d s", int(t.lease.Seconds()), int(t.renew.Seconds()), int(t.retry.Seconds()))
}

var (
	timingDefault = timing{15 * time.Second, 10 * time.Second, 2 * time.Second}
	timingFast    = timing{5 * time.Second, 3 * time.Second, time.Second}
)

// event is a callback one candidate received.
type event struct {
	who    string // the candidate that received it
	holder string // OnNewHolder / OnNewLeader: the holder it saw
	token  int64  // lockwarden: fencing token
	at     time.Time
}

// recorder collects the callbacks of one lock's candidates. Its channels are large enough
// that a callback never blocks on the bench.
type recorder struct {
	started chan event // OnStartedLeading
	seen    chan event // OnNewHolder (lockwarden) / OnNewLeader (client-go)
}

func newRecorder() *recorder {
	return &recorder{started: make(chan event, 1024), seen: make(chan event, 8192)}
}

func (r *recorder) put(ch chan event, e event) {
	select {
	case ch <- e:
	default: // nobody is reading this kind of event in this run
	}
}

// candidate is one contender: a pod with its pkg/leadership elector, or a client-go elector.
type candidate struct {
	name   string
	pod    *corev1.Pod // lockwarden only
	cancel context.CancelFunc
	done   chan struct{}
}

// stop ends the candidate's elector (the process exits) and waits for it.
func (c *candidate) stop() {
	c.cancel()
	<-c.done
}

// startPodCandidate creates a Ready pod with labels and runs a pkg/leadership elector for it,
// as the pod's process would.
func startPodCandidate(ctx context.Context, cfg *rest.Config, k *podsim.Kubelet, lock, name string, labels map[string]string, rec *recorder) (*candidate, error) {
	pod, err := k.CreateReadyPod(ctx, name, labels)
	if err != nil {
		return nil, err
	}
	el, err := leadership.New(leadership.Config{
		Config: cfg, Namespace: k.Namespace, Lock: lock, Identity: pod.UID, Name: name,
		Callbacks: leadership.Callbacks{
			OnStartedLeading: func(_ context.Context, token int64) {
				rec.put(rec.started, event{who: name, token: token, at: time.Now()})
			},
			OnNewHolder: func(holder string, token int64) {
				rec.put(rec.seen, event{who: name, holder: holder, token: token, at: time.Now()})
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("elector %s: %w", name, err)
	}
	// The elector's context is not derived from ctx: the caller stops it with stop().
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &candidate{name: name, pod: pod, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		_ = el.Run(ectx)
	}()
	return c, nil
}

// startClientGoCandidate runs a client-go LeaderElector on a Lease, with its own client (as
// its own process would have: default client-side rate limits).
func startClientGoCandidate(ctx context.Context, cfg *rest.Config, ns, lock, id string, t timing, releaseOnCancel bool, rec *recorder) (*candidate, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("clientset: %w", err)
	}
	lk := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: lock},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lk, Name: lock,
		LeaseDuration: t.lease, RenewDeadline: t.renew, RetryPeriod: t.retry,
		ReleaseOnCancel: releaseOnCancel,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				rec.put(rec.started, event{who: id, at: time.Now()})
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(holder string) {
				rec.put(rec.seen, event{who: id, holder: holder, at: time.Now()})
			},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("leader elector %s: %w", id, err)
	}
	ectx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &candidate{name: id, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		le.Run(ectx)
	}()
	return c, nil
}

// createLock creates a DistributedLock selecting pods labelled lock=<name>, with lease L and
// lockDelaySeconds unset (= L).
func (s *stack) createLock(ctx context.Context, ns, name string, lease time.Duration) error {
	l := &lockv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: lockv1.DistributedLockSpec{
			Candidates:           lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"lock": name})},
			LeaseDurationSeconds: int32(lease / time.Second),
			Strategy:             lockv1.StrategyOldestReady,
		},
	}
	if err := s.crd.Create(ctx, l); err != nil {
		return fmt.Errorf("create lock %s/%s: %w", ns, name, err)
	}
	return nil
}

// stopAll stops candidates concurrently and waits for all.
func stopAll(cs []*candidate) {
	for _, c := range cs {
		if c != nil {
			c.cancel()
		}
	}
	for _, c := range cs {
		if c != nil {
			<-c.done
		}
	}
}
