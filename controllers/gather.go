package controllers

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/eligibility"
)

// gather reads what a turn decides on into t.in: the lock key (linearizably), the
// candidates (cache), the evidence about the published holder and this replica's clocks.
// Its only writes are to this replica's memory (the clocks it starts).
func (t *turn) gather(ctx context.Context) error {
	in := &t.in
	in.spec, in.deleting, in.status = &t.lock.Spec, t.lock.DeletionTimestamp != nil, &t.lock.Status
	in.uid, in.resourceVersion, in.fresh = t.lock.UID, t.lock.ResourceVersion, t.fresh
	in.epoch = t.r.Election.Token()
	in.release = readReleases(t.lock.Annotations)
	if t.slot != nil {
		t.slot.into(in)
	}
	ictx, cancel := context.WithTimeout(ctx, etcdTimeout)
	h, err := t.r.Engine.Inspect(ictx, t.key)
	cancel()
	if err != nil {
		t.r.Metrics.etcdError("inspect")
		return fmt.Errorf("read %s: %w", t.key, err)
	}
	in.g, in.rev = grantFrom(h), h.Revision
	t.readCandidates(ctx)
	st := in.status
	if g := in.g; g.present() && g.token <= st.MaxFencingToken && g.token != st.FencingToken && in.rev > st.MaxFencingToken {
		cctx, cancel := context.WithTimeout(ctx, etcdTimeout)
		in.restoredStale, err = t.r.Engine.Compacted(cctx, st.MaxFencingToken)
		cancel()
		if err != nil {
			return fmt.Errorf("read %s history at revision %d: %w", t.key, st.MaxFencingToken, err)
		}
	}
	if st.HolderUID != "" {
		in.holder = t.holderEvidence(ctx, st.HolderUID)
	}
	t.measure()
	return nil
}

// measure reads (and starts) this replica's clocks for the turn.
func (t *turn) measure() {
	in, mem, key, uid := &t.in, t.r.mem, t.key, t.lock.UID
	st := in.status
	p := preferredPod(in.spec, in.pods)
	in.clocks.preferred = mem.preferredEligibleFor(key, uid, podUID(p), p != nil && p.UID != st.HolderUID && eligibility.Eligible(p))
	if g := in.g; g.present() && g.token == st.FencingToken && fastPathGrant(g) {
		in.clocks.restartGrant = mem.restartGrantFor(key, uid, g.token)
	}
	if st.HolderUID == "" || st.Phase != lockv1.PhaseReleasing {
		// A Releasing clock counts only while this replica keeps seeing Releasing: a wait
		// interrupted by a Held term (a return whose acknowledgement was lost) starts again.
		mem.notReleasing(key, uid)
		return
	}
	in.clocks.releasing = mem.releasingFor(key, uid, st.FencingToken)
	e := termEnd(in)
	// Eligible again: seen (not merely not asked about), eligible, and nothing else ends the
	// term.
	again := !e.attested && e.reason == "" && e.pod != nil && eligibility.Eligible(e.pod) &&
		in.g.present() && in.g.token == st.FencingToken && in.g.rec.Phase == lockv1.PhaseReleasing
	in.clocks.eligibleAgain = mem.holderEligibleFor(key, uid, again)
	in.clocks.mayReturn = mem.mayReturn(key, uid, time.Duration(in.spec.EffectiveLockDelaySeconds())*time.Second)
}

func podUID(p *corev1.Pod) types.UID {
	if p == nil {
		return ""
	}
	return p.UID
}

// holderEvidence finds the published holder and what is known about its end. The cache
// answers when it has the pod with that UID; absence or another UID is confirmed by an
// uncached GET, never taken from the cache.
func (t *turn) holderEvidence(ctx context.Context, uid types.UID) evidence {
	var e evidence
	e.remembered = t.r.mem.wasAttested(t.key, t.lock.UID, uid, t.lock.Status.FencingToken)
	e.pod, e.gone = t.holderPod(ctx, uid)
	if e.pod != nil {
		e.node = t.node(ctx, e.pod)
	}
	return e
}

// holderPod returns the pod with the published holder's name and UID; gone is true only
// when the API server says the pod is NotFound or has another UID.
func (t *turn) holderPod(ctx context.Context, uid types.UID) (pod *corev1.Pod, gone bool) {
	for i := range t.in.pods {
		if t.in.pods[i].UID == uid {
			return &t.in.pods[i], false
		}
	}
	var cached corev1.Pod
	name := client.ObjectKey{Namespace: t.lock.Namespace, Name: t.lock.Status.Holder}
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

// node returns the pod's node from the cache, or nil.
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

// readCandidates lists the pods the lock's selector matches, from the cache.
func (t *turn) readCandidates(ctx context.Context) {
	sel := t.lock.Spec.Candidates.Selector
	if sel == nil {
		t.selErr = errors.New("spec.candidates.selector is not set")
		return
	}
	selector, err := sel.AsSelector()
	if err != nil {
		t.selErr = err
		return
	}
	pods, err := candidatePods(ctx, t.r.Client, t.lock, selector)
	if err != nil {
		t.selErr = fmt.Errorf("list candidate pods: %w", err)
		return
	}
	t.allPods = pods
	if t.slot != nil {
		pods = slotCandidates(pods, t.slot.others)
	}
	t.in.selector, t.in.pods = selector, pods
}
