package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// rawConcurrency are the numbers of concurrent writers the raw status-write rate is
// measured at; the best is the raw rate.
var rawConcurrency = []int{4, 16, 64}

// rawResult is the API server's own status-write rate on DistributedLocks: what a plain
// client gets, with no manager running.
type rawResult struct {
	rate        float64         // writes per second at the best concurrency
	concurrency int             // that concurrency
	byLevel     map[int]float64 // writes per second at each concurrency
	apiCPU      float64         // kube-apiserver CPU seconds per write at the best concurrency
	after       float64         // writes per second at that concurrency after the manager's run
}

// mean is the rate our grants are read against: the mean of the raw rate before and after
// the manager's run (before alone when after was not measured).
func (x *rawResult) mean() float64 {
	if x.after == 0 {
		return x.rate
	}
	return (x.rate + x.after) / 2
}

// rawNamespace holds the locks the raw rate is measured on; they are deleted afterwards.
const rawNamespace = "scale-raw"

// measureRaw creates n DistributedLocks in rawNamespace (no finalizer policy installed yet,
// no manager running), writes the status of every one of them once per concurrency level
// (each writer an update with the resourceVersion of its last write, as the manager's), and
// deletes them again. The status written has the shape of the manager's first grant: the
// holder, token, lease, one history entry and the three conditions.
func measureRaw(ctx context.Context, s *stack, n int) (*rawResult, error) {
	if err := s.namespace(ctx, rawNamespace); err != nil {
		return nil, err
	}
	locks := make([]*lockv1.DistributedLock, n)
	if err := parallel(n, 32, func(i int) error {
		l := &lockv1.DistributedLock{
			ObjectMeta: metav1.ObjectMeta{Namespace: rawNamespace, Name: fmt.Sprintf("raw-%d", i)},
			Spec: lockv1.DistributedLockSpec{
				Candidates:           lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"lock": fmt.Sprintf("raw-%d", i)})},
				LeaseDurationSeconds: int32(timingDefault.lease / time.Second),
				Strategy:             lockv1.StrategyOldestReady,
			},
		}
		if err := s.crd.Create(ctx, l); err != nil {
			return fmt.Errorf("create raw lock: %w", err)
		}
		locks[i] = l
		return nil
	}); err != nil {
		return nil, err
	}
	res := &rawResult{byLevel: map[int]float64{}}
	for _, c := range rawConcurrency {
		rate, cpu, err := rawWrites(ctx, s, locks, c)
		if err != nil {
			return nil, err
		}
		res.byLevel[c] = rate
		if rate > res.rate {
			res.rate, res.concurrency, res.apiCPU = rate, c, cpu
		}
	}
	// Gone before the measured manager starts, which would otherwise reconcile them too.
	if err := s.crd.DeleteAllOf(ctx, &lockv1.DistributedLock{}, client.InNamespace(rawNamespace)); err != nil {
		return nil, fmt.Errorf("delete raw locks: %w", err)
	}
	return res, waitNoLocks(ctx, s, rawNamespace)
}

// rawWrites writes the status of every lock once with concurrency writers, each lock's token
// one above its status.maxFencingToken, and returns the writes per second and the
// kube-apiserver's CPU seconds per write.
func rawWrites(ctx context.Context, s *stack, locks []*lockv1.DistributedLock, concurrency int) (rate, cpu float64, err error) {
	before, err := s.apiMetrics(ctx)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := parallel(len(locks), concurrency, func(i int) error {
		l := locks[i]
		l.Status = rawStatus(l, l.Status.MaxFencingToken+1)
		return s.crd.Status().Update(ctx, l) // l gets the new resourceVersion
	}); err != nil {
		return 0, 0, fmt.Errorf("raw status writes at concurrency %d: %w", concurrency, err)
	}
	rate = float64(len(locks)) / time.Since(start).Seconds()
	after, err := s.apiMetrics(ctx)
	if err != nil {
		return 0, 0, err
	}
	return rate, (sum(after, "process_cpu_seconds_total", nil) - sum(before, "process_cpu_seconds_total", nil)) / float64(len(locks)), nil
}

// measureRawAfter measures the raw rate again after the manager's run, on the row's own
// locks with the manager stopped, at the concurrency that was best before: the load of a
// shared machine drifts, and the rate the ratio is read against is the mean of the two.
func measureRawAfter(ctx context.Context, s *stack, ns string, raw *rawResult) error {
	var list lockv1.DistributedLockList
	if err := s.crd.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return fmt.Errorf("list locks: %w", err)
	}
	locks := make([]*lockv1.DistributedLock, len(list.Items))
	for i := range list.Items {
		locks[i] = &list.Items[i]
	}
	rate, _, err := rawWrites(ctx, s, locks, raw.concurrency)
	raw.after = rate
	return err
}

// rawStatus is a first grant's status for l with token, as the manager writes it (the epoch
// never below the one l has: the CRD's rules refuse a decrease).
func rawStatus(l *lockv1.DistributedLock, token int64) lockv1.DistributedLockStatus {
	now := metav1.Now()
	holder := l.Name + "-p0"
	uid := types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", token))
	cond := func(typ, reason, msg string, ok bool) metav1.Condition {
		st := metav1.ConditionFalse
		if ok {
			st = metav1.ConditionTrue
		}
		return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: l.Generation, LastTransitionTime: now}
	}
	return lockv1.DistributedLockStatus{
		Phase: lockv1.PhaseHeld, Holder: holder, HolderUID: uid, FencingToken: token, MaxFencingToken: token,
		ControllerEpoch: max(l.Status.ControllerEpoch, 1), TermLeaseSeconds: l.Spec.LeaseDurationSeconds, LeaseID: "694d7f1a2b3c4d5e",
		AcquireTime: &now, Transitions: 1, EligibleCandidates: 3, ObservedGeneration: l.Generation,
		Conditions: []metav1.Condition{
			cond(lockv1.ConditionHeld, lockv1.ReasonHolderPublished, fmt.Sprintf("held by %s with token %d", holder, token), true),
			cond(lockv1.ConditionEtcdAvailable, lockv1.ReasonEtcdReachable, "etcd answered the last linearizable read", true),
			cond(lockv1.ConditionValid, lockv1.ReasonSpecValid, "the selector matches candidate pods", true),
		},
		History: []lockv1.Term{{Holder: holder, HolderUID: uid, Token: token, Acquired: now, Reason: lockv1.ReasonGranted}},
	}
}

// waitNoLocks waits until the namespace has no DistributedLock.
func waitNoLocks(ctx context.Context, s *stack, ns string) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var list lockv1.DistributedLockList
		if err := s.crd.List(ctx, &list, client.InNamespace(ns), client.Limit(1)); err != nil {
			return fmt.Errorf("list %s: %w", ns, err)
		}
		if len(list.Items) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("locks of %s still there after 5 minutes", ns)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// profileWindow is how long the CPU profiles run, from the first lock seen Held: the whole
// granting at 1,000 locks, and a steady stretch of it at 10,000.
const profileWindow = 10 * time.Second

// installPolicy installs config/policy (the holder-release and finalizer admission policies)
// or, without finalizer, the holder-release policy alone; it waits until a dry-run create of
// a lock shows the finalizer policy's effect, or its absence.
func installPolicy(ctx context.Context, s *stack, finalizer bool) error {
	files := []string{"config/policy/holder_release_policy.yaml", "config/policy/holder_release_binding.yaml"}
	if finalizer {
		files = []string{"config/policy"}
	}
	if err := s.env.Apply(ctx, s.crd, files...); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		probe := &lockv1.DistributedLock{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "policy-probe"},
			Spec:       lockv1.DistributedLockSpec{Candidates: lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"a": "b"})}, LeaseDurationSeconds: 15},
		}
		if err := s.crd.Create(ctx, probe, client.DryRunAll); err != nil {
			return fmt.Errorf("dry-run create of a lock: %w", err)
		}
		if got := slices.Contains(probe.Finalizers, "lockwarden.io/release"); got == finalizer {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the finalizer policy not in effect after a minute (finalizers on create: %v)", probe.Finalizers)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
