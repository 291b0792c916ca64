package main

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// routedService is the selector-less Service a routing run's lock routes to its holder.
const routedService = "chaos-primary"

// setupRouting creates the Service and turns routing on in the lock about to be created.
func (r *run) setupRouting(ctx context.Context, lock *lockv1.DistributedLock) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: routedService, Namespace: r.ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "work", Port: 8080, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := r.h.cs.CoreV1().Services(r.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service: %w", err)
	}
	lock.Spec.Routing = &lockv1.Routing{Service: routedService}
	return nil
}

// watchSlices records every version of the Service's EndpointSlices it sees (the pods each
// lists as ready), for CheckRouting.
func (r *run) watchSlices(ctx context.Context) {
	sel := metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + routedService}
	rv := ""
	for ctx.Err() == nil {
		opts := sel
		opts.ResourceVersion = rv
		w, err := r.h.cs.DiscoveryV1().EndpointSlices(r.ns).Watch(ctx, opts)
		if err != nil {
			rv = ""
			sleepCtx(ctx, 100*time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			s, ok := ev.Object.(*discoveryv1.EndpointSlice)
			if !ok {
				if st, ok := ev.Object.(*metav1.Status); ok && st.Code == 410 {
					rv = ""
				}
				continue
			}
			rv = s.ResourceVersion
			r.recordSlice(s, ev.Type == watch.Deleted)
		}
		w.Stop()
	}
}

func (r *run) recordSlice(s *discoveryv1.EndpointSlice, deleted bool) {
	v, _ := strconv.ParseUint(s.ResourceVersion, 10, 64)
	o := chaos.SliceObs{RV: v, Mono: chaos.Mono()}
	if !deleted {
		for _, ep := range s.Endpoints {
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			uid := "(no targetRef)"
			if ep.TargetRef != nil {
				uid = string(ep.TargetRef.UID)
			}
			o.Ready = append(o.Ready, uid)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if n := len(r.slices); n > 0 && r.slices[n-1].RV >= v {
		return // a replay after a re-watch
	}
	r.slices = append(r.slices, o)
}

// routingMove moves the term of a routed lock: f.Member 0 deletes the holder's pod
// gracefully (an attested handoff: the next grant at once), 1 fails its readiness for Hold
// (Releasing, the lock delay, the next holder), 2 SIGSTOPs its worker for Hold (it turns
// NotReady, then the same).
func (r *run) routingMove(ctx context.Context, f chaos.Fault) (healFunc, error) {
	s := r.holderSlot(ctx)
	switch f.Member {
	case 0:
		r.note("routing-move: delete %s gracefully", s.name)
		if err := r.kubelet.gracefulDelete(ctx, s, deleteOpts{}); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return r.startPod(ctx, s) }, nil
	case 1:
		r.note("routing-move: %s NotReady", s.name)
		s.setUnready(true)
		return func(context.Context) error { s.setUnready(false); return nil }, nil
	}
	w := s.worker()
	if w == nil {
		return nothing, nil
	}
	r.note("routing-move: SIGSTOP %s", s.name)
	w.p.signal(syscall.SIGSTOP)
	return func(context.Context) error { w.p.signal(syscall.SIGCONT); return nil }, nil
}

// routedCounts says how many slice versions the run saw and how many listed a pod.
func routedCounts(slices []chaos.SliceObs) (n, listing int) {
	for _, s := range slices {
		if len(s.Ready) > 0 {
			listing++
		}
	}
	return len(slices), listing
}
