package controllers

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// ending says whether and why the published holder's term must end.
type ending struct {
	// reason is "" while the term may continue.
	reason string
	// attested: the holder's processes are known to have stopped; the next grant may follow
	// at once.
	attested bool
	// pod is the holder pod when it exists with the published UID.
	pod *corev1.Pod
	// recheck asks for another turn (Preferred preemption timing).
	recheck time.Duration
}

// endReason evaluates the published holder against the term-ending rules, in order:
// attested termination first (the fast path), then every end that must go through
// Releasing.
func (t *turn) endReason(ctx context.Context) ending {
	uid := t.holderUID()
	pod, gone := t.holderPod(ctx, uid)
	e := ending{pod: pod}
	spec := &t.lock.Spec
	switch {
	case t.r.mem.wasAttested(uid) || (pod != nil && attestedTerminated(pod, t.node(ctx, pod))):
		e.reason, e.attested = lockv1.ReasonHolderTerminated, true
	case t.lock.DeletionTimestamp != nil:
		e.reason = lockv1.ReasonDeleted
	case gone:
		e.reason = lockv1.ReasonHolderGone
	case pod == nil:
		// The API server could not be asked: keep the term; the next turn asks again.
		e.recheck = time.Second
	case pod.DeletionTimestamp != nil:
		e.reason = lockv1.ReasonHolderTerminating
	case t.selector == nil || !t.selector.Matches(labels.Set(pod.Labels)):
		e.reason = lockv1.ReasonSelectorChanged
	case spec.Suspend:
		e.reason = lockv1.ReasonSuspended
	case !eligible(pod):
		e.reason = lockv1.ReasonHolderNotReady
	case t.g.present() && t.g.rec.Strategy != "" && t.g.rec.Strategy != spec.Strategy:
		e.reason = lockv1.ReasonStrategyChanged
	case spec.Strategy == lockv1.StrategyPreferred:
		e.reason, e.recheck = t.preemption(uid)
	}
	return e
}

// preemption decides Preferred preemption: the preferred pod takes over once it has been
// continuously eligible for the lock delay.
func (t *turn) preemption(holder types.UID) (string, time.Duration) {
	spec := &t.lock.Spec
	var preferred *corev1.Pod
	for i := range t.pods {
		if t.pods[i].Name == spec.PreferredHolder {
			preferred = &t.pods[i]
		}
	}
	if preferred == nil || preferred.UID == holder {
		t.r.mem.preferredEligibleFor(t.lock.UID, "", false)
		return "", 0
	}
	ok := t.r.mem.preferredEligibleFor(t.lock.UID, preferred.UID, eligible(preferred))
	if !eligible(preferred) {
		return "", 0
	}
	delay := time.Duration(spec.EffectiveLockDelaySeconds()) * time.Second
	if ok >= delay {
		return lockv1.ReasonPreempted, 0
	}
	return "", delay - ok
}

// holderPod finds the published holder. The cache answers when it has the pod with that
// UID; absence or another UID is confirmed by an uncached GET, never taken from the cache.
// gone is true only when the API server says the pod is NotFound or has another UID.
func (t *turn) holderPod(ctx context.Context, uid types.UID) (pod *corev1.Pod, gone bool) {
	for i := range t.pods {
		if t.pods[i].UID == uid {
			return &t.pods[i], false
		}
	}
	var cached corev1.Pod
	name := client.ObjectKey{Namespace: t.lock.Namespace, Name: t.st.Holder}
	if err := t.r.Client.Get(ctx, name, &cached); err == nil && cached.UID == uid {
		return &cached, false // exists but no longer matches the selector
	}
	var live corev1.Pod
	err := t.r.APIReader.Get(ctx, name, &live)
	switch {
	case apierrors.IsNotFound(err):
		return nil, true
	case err != nil:
		return nil, false
	case live.UID != uid:
		return nil, true
	}
	return &live, false
}

// node returns the holder's node from the cache, or nil.
func (t *turn) node(ctx context.Context, pod *corev1.Pod) *corev1.Node {
	if pod.Spec.NodeName == "" {
		return nil
	}
	var n corev1.Node
	if err := t.r.Client.Get(ctx, client.ObjectKey{Name: pod.Spec.NodeName}, &n); err != nil {
		return nil
	}
	return &n
}
