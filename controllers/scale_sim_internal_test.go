package controllers

import (
	"encoding/json"
	"fmt"
	"runtime"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/eligibility"
)

// BenchmarkSimulatePerLock simulates the controller's own work per lock, without an API
// server or etcd, at 10,000 and 100,000 locks with 3 candidate pods each (docs/scale.md):
//
//   - "grant": the first turn of every lock: measure (this replica's clocks, on a fake
//     clock), decide, the grant's status (publishGrant and the conditions publish sets), the
//     changed-status check before the write, and the JSON of the update and of its answer
//     and watch event (the client's encoding and the cache's decoding);
//   - "steady": a turn of every Held lock (the holder eligible): measure and decide, which
//     must write nothing.
//
// What it leaves out is I/O and what the API server and etcd spend: the cache's list of
// candidates (an index lookup of 3 pods in the real controller), the etcd read and
// transaction, the HTTP round trips. It reports the process's CPU time (GC included) and the
// allocations per lock for each pass, and the heap the locks, pods and per-lock memory take
// (after a GC), per lock.
//
//	go test -run '^$' -bench SimulatePerLock -benchtime 1x ./controllers/
func BenchmarkSimulatePerLock(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("locks=%d", n), func(b *testing.B) {
			for b.Loop() {
				simulate(b, n)
			}
		})
	}
}

// simLock is one simulated lock: its object (as the cache holds it) and its pods.
type simLock struct {
	lock *lockv1.DistributedLock
	pods []corev1.Pod
	key  string
}

func simulate(b *testing.B, n int) {
	clock := time.Unix(1_000_000, 0)
	r := &Reconciler{Election: staticFence{epoch: 3}}
	r.init()
	r.mem.now = func() time.Time { return clock }
	before := heapInUse()
	locks := make([]simLock, n)
	for i := range locks {
		locks[i] = newSimLock(i)
	}
	var st runtime.MemStats

	runtime.ReadMemStats(&st)
	mallocs, start := st.Mallocs, cpuTime(b)
	for i := range locks {
		clock = clock.Add(time.Millisecond) // 1,000 grants per second of fake time
		simGrant(b, r, &locks[i], int64(1000+i), clock)
	}
	grant := cpuTime(b) - start
	runtime.ReadMemStats(&st)
	grantAllocs := st.Mallocs - mallocs
	held := heapInUse() - before

	mallocs, start = st.Mallocs, cpuTime(b)
	for i := range locks {
		clock = clock.Add(time.Millisecond)
		simSteady(b, r, &locks[i])
	}
	steady := cpuTime(b) - start
	runtime.ReadMemStats(&st)

	b.ReportMetric(float64(grant.Nanoseconds())/float64(n), "grant-cpu-ns/lock")
	b.ReportMetric(float64(grantAllocs)/float64(n), "grant-allocs/lock")
	b.ReportMetric(float64(steady.Nanoseconds())/float64(n), "steady-cpu-ns/lock")
	b.ReportMetric(float64(st.Mallocs-mallocs)/float64(n), "steady-allocs/lock")
	b.ReportMetric(float64(held)/float64(n)/1024, "heap-KiB/lock")
	if got := r.mem.size(); got != n {
		b.Fatalf("memory holds %d locks, want %d", got, n)
	}
	runtime.KeepAlive(locks)
}

// newSimLock is lock i as the benchmark's scale section creates it, with its 3 Ready pods.
func newSimLock(i int) simLock {
	name := fmt.Sprintf("lock-%d", i)
	l := &lockv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Namespace: "scale", Name: name, UID: types.UID(fmt.Sprintf("lock-uid-%d", i)), Generation: 1,
			ResourceVersion: fmt.Sprint(100 + i), Finalizers: []string{Finalizer}},
		Spec: lockv1.DistributedLockSpec{
			Candidates:           lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"lock": name})},
			LeaseDurationSeconds: 15, Strategy: lockv1.StrategyOldestReady,
		},
	}
	pods := make([]corev1.Pod, 3)
	for j := range pods {
		pods[j] = corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "scale", Name: fmt.Sprintf("%s-p%d", name, j), UID: types.UID(fmt.Sprintf("pod-uid-%d-%d", i, j)),
				Labels: map[string]string{"lock": name}, CreationTimestamp: metav1.Unix(int64(j), 0)},
			Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning,
				Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
				ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}},
		}
	}
	return simLock{lock: l, pods: pods, key: lockKey(l.Namespace, l.Name)}
}

// simTurn is a turn on sl with what gather would have read: etcd's grant g (absent when
// zero) and the cache's pods.
func simTurn(r *Reconciler, sl *simLock, g grant) *turn {
	t := &turn{r: r, lock: sl.lock, key: sl.key, st: *sl.lock.Status.DeepCopy()}
	in := &t.in
	in.spec, in.status, in.epoch = &sl.lock.Spec, &sl.lock.Status, r.Election.Token()
	in.g, in.rev = g, g.token+1
	in.selector = labels.SelectorFromSet(labels.Set{"lock": sl.lock.Name})
	in.pods = sl.pods
	if uid := in.status.HolderUID; uid != "" {
		for i := range in.pods {
			if in.pods[i].UID == uid {
				in.holder.pod = &in.pods[i]
			}
		}
	}
	t.measure()
	return t
}

// simGrant is a new lock's first turn, up to the status write and the JSON it costs.
func simGrant(b *testing.B, r *Reconciler, sl *simLock, token int64, now time.Time) {
	t := simTurn(r, sl, grant{})
	d := decide(&t.in)
	if d.verb != actGrant || d.next == nil {
		b.Fatalf("%s: decision %d, want a grant", sl.key, d.verb)
	}
	rec := record{Name: d.next.Name, Phase: lockv1.PhaseHeld, Strategy: sl.lock.Spec.Strategy, LeaseSeconds: sl.lock.Spec.LeaseDurationSeconds, Epoch: t.in.epoch}
	_ = rec.encode() // the record put in etcd
	g := grant{holderUID: d.next.UID, token: token, lease: 0x694d7f, rec: rec}
	publishGrant(&t.st, d.next.Name, g, g.lease, d.reason, metav1.NewTime(now))
	gen := sl.lock.Generation
	t.st.ObservedGeneration = gen
	setHeldCondition(&t.st, gen, &sl.lock.Spec, nil, t.in.pods)
	setCondition(&t.st, gen, lockv1.ConditionEtcdAvailable, true, lockv1.ReasonEtcdReachable, "etcd answered the last linearizable read")
	v := judge(&sl.lock.Spec, nil, t.in.pods)
	setCondition(&t.st, gen, lockv1.ConditionValid, v.ok, v.reason, v.message)
	t.st.EligibleCandidates = eligibility.Count(t.in.pods)
	t.st.ControllerEpoch = t.in.epoch
	if equality.Semantic.DeepEqual(&sl.lock.Status, &t.st) {
		b.Fatalf("%s: a grant that changes no status", sl.key)
	}
	sl.lock.Status = t.st
	body, err := json.Marshal(sl.lock) // the update sent
	if err != nil {
		b.Fatal(err)
	}
	for range 2 { // its answer, and the watch event the cache decodes
		var back lockv1.DistributedLock
		if err := json.Unmarshal(body, &back); err != nil {
			b.Fatal(err)
		}
	}
	r.mem.wrote(sl.key, sl.lock.UID, sl.lock.ResourceVersion)
	r.mem.granted(sl.key, sl.lock.UID)
	sl.lock.ResourceVersion = fmt.Sprint(token)
}

// simSteady is a turn of a Held lock whose holder is eligible: it must write nothing.
func simSteady(b *testing.B, r *Reconciler, sl *simLock) {
	st := &sl.lock.Status
	rec := record{Name: st.Holder, Phase: lockv1.PhaseHeld, Strategy: sl.lock.Spec.Strategy, LeaseSeconds: st.TermLeaseSeconds, Epoch: st.ControllerEpoch}
	t := simTurn(r, sl, grant{holderUID: st.HolderUID, token: st.FencingToken, lease: 0x694d7f, rec: rec})
	if d := decide(&t.in); d.verb != actWait || writesEtcd(d) {
		b.Fatalf("%s: steady decision %d, want a wait", sl.key, d.verb)
	}
}

// staticFence is an election that is always held with one epoch: the simulation writes
// nothing that it would guard.
type staticFence struct{ epoch int64 }

func (f staticFence) Token() int64        { return f.epoch }
func (f staticFence) Valid() bool         { return true }
func (staticFence) IsOwner() clientv3.Cmp { return clientv3.Cmp{} }

// cpuTime is the CPU time this process has used (user and system, every thread: the
// garbage collector's included). On a shared machine it is steadier than the wall clock.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func heapInUse() uint64 {
	runtime.GC()
	var st runtime.MemStats
	runtime.ReadMemStats(&st)
	return st.HeapAlloc
}
