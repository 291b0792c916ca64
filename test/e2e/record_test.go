//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/testenv"
)

// podObs is one pod watch event as the test received it.
type podObs struct {
	At   time.Time
	Type watch.EventType
	Pod  *corev1.Pod
}

// lockObs is one lock watch event as the test received it.
type lockObs struct {
	At   time.Time
	Type watch.EventType
	Lock *lockv1.DistributedLock
}

// recorder keeps every pod and DistributedLock watch event of one namespace, stamped with
// this process's clock when received: the sequence the scenarios are judged on.
type recorder struct {
	mu    sync.Mutex
	pods  []podObs
	locks []lockObs
	c     client.WithWatch
	ns    string
	stop  context.CancelFunc
	done  sync.WaitGroup
}

// startRecorder watches namespace ns until the test ends.
func startRecorder(t testing.TB, n *node, ns string) *recorder {
	t.Helper()
	s, err := testenv.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.NewWithWatch(n.cfg, client.Options{Scheme: s})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{c: c, ns: ns, stop: cancel}
	r.done.Add(2)
	go r.watch(ctx, &corev1.PodList{}, func(at time.Time, e watch.Event) {
		if p, ok := e.Object.(*corev1.Pod); ok {
			r.mu.Lock()
			r.pods = append(r.pods, podObs{At: at, Type: e.Type, Pod: p})
			r.mu.Unlock()
		}
	})
	go r.watch(ctx, &lockv1.DistributedLockList{}, func(at time.Time, e watch.Event) {
		if l, ok := e.Object.(*lockv1.DistributedLock); ok {
			r.mu.Lock()
			r.locks = append(r.locks, lockObs{At: at, Type: e.Type, Lock: l})
			r.mu.Unlock()
		}
	})
	t.Cleanup(func() {
		cancel()
		r.done.Wait()
	})
	return r
}

// watch runs one watch, started again from the last resourceVersion when the server ends it.
func (r *recorder) watch(ctx context.Context, list client.ObjectList, record func(time.Time, watch.Event)) {
	defer r.done.Done()
	rv := ""
	for ctx.Err() == nil {
		w, err := r.c.Watch(ctx, list, client.InNamespace(r.ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		for e := range w.ResultChan() {
			at := time.Now()
			if e.Type == watch.Error {
				rv = "" // expired: start from now; the gap is visible in the log
				break
			}
			if o, ok := e.Object.(client.Object); ok {
				rv = o.GetResourceVersion()
			}
			if e.Type != watch.Bookmark {
				record(at, e)
			}
		}
		w.Stop()
	}
}

// mark is a position in the recording.
type mark struct{ pods, locks int }

func (r *recorder) mark() mark {
	r.mu.Lock()
	defer r.mu.Unlock()
	return mark{len(r.pods), len(r.locks)}
}

// since returns the events recorded after m; the lock events start with the last one
// before m, the state the scenario began in (a term that ends before the next event is
// still seen).
func (r *recorder) since(m mark) ([]podObs, []lockObs) {
	r.mu.Lock()
	defer r.mu.Unlock()
	from := max(m.locks-1, 0)
	return append([]podObs(nil), r.pods[m.pods:]...), append([]lockObs(nil), r.locks[from:]...)
}

// lastLock returns the newest recorded version of the lock named name.
func (r *recorder) lastLock(name string) *lockv1.DistributedLock {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.locks) - 1; i >= 0; i-- {
		if r.locks[i].Lock.Name == name {
			return r.locks[i].Lock
		}
	}
	return nil
}

// waitLock waits until the newest recorded version of the lock satisfies ok.
func (r *recorder) waitLock(t testing.TB, name string, timeout time.Duration, desc string, ok func(*lockv1.DistributedLock) bool) *lockv1.DistributedLock {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if l := r.lastLock(name); l != nil && ok(l) {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock %s: no %s within %v; last status %s", name, desc, timeout, describeLock(r.lastLock(name)))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// describePod is one line per pod event, in the form of the recordings in
// reference/real-node/evidence/ (watch.py).
func describePod(o podObs, t0 time.Time) string {
	p := o.Pod
	del := "None"
	if p.DeletionTimestamp != nil {
		del = p.DeletionTimestamp.UTC().Format(time.RFC3339)
	}
	var cs []string
	for _, c := range p.Status.ContainerStatuses {
		st := "waiting"
		switch {
		case c.State.Running != nil:
			st = "running"
		case c.State.Terminated != nil:
			st = fmt.Sprintf("terminated(exit=%d,reason=%s)", c.State.Terminated.ExitCode, c.State.Terminated.Reason)
		case c.State.Waiting != nil:
			st = "waiting(" + c.State.Waiting.Reason + ")"
		}
		cs = append(cs, fmt.Sprintf("%s:%s ready=%v restarts=%d", c.Name, st, c.Ready, c.RestartCount))
	}
	var conds []string
	for _, c := range p.Status.Conditions {
		s := string(c.Type) + "=" + string(c.Status)
		if c.Reason != "" && c.Type == corev1.DisruptionTarget {
			s += "(" + c.Reason + ")"
		}
		conds = append(conds, s)
	}
	return fmt.Sprintf("%+8.3fs %-8s pod %s rv=%s phase=%s delTs=%s containers=[%s] conds=[%s]", o.At.Sub(t0).Seconds(), o.Type,
		p.Name, p.ResourceVersion, p.Status.Phase, del, strings.Join(cs, "; "), strings.Join(conds, ","))
}

// describeLock is one line per lock version.
func describeLock(l *lockv1.DistributedLock) string {
	if l == nil {
		return "(none recorded)"
	}
	s := l.Status
	return fmt.Sprintf("rv=%s phase=%s holder=%s token=%d max=%d epoch=%d", l.ResourceVersion, s.Phase, s.Holder, s.FencingToken, s.MaxFencingToken, s.ControllerEpoch)
}

// timeline merges pod and lock events into lines relative to t0.
func timeline(pods []podObs, locks []lockObs, t0 time.Time) string {
	type line struct {
		at   time.Time
		text string
	}
	var ls []line
	for _, p := range pods {
		ls = append(ls, line{p.At, describePod(p, t0)})
	}
	for _, l := range locks {
		ls = append(ls, line{l.At, fmt.Sprintf("%+8.3fs %-8s lock %s %s", l.At.Sub(t0).Seconds(), l.Type, l.Lock.Name, describeLock(l.Lock))})
	}
	sort.SliceStable(ls, func(i, j int) bool { return ls[i].at.Before(ls[j].at) })
	var b strings.Builder
	for _, l := range ls {
		b.WriteString(l.text + "\n")
	}
	return b.String()
}
