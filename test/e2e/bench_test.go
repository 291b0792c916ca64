//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// BenchmarkHandoffRealPods measures a planned handoff (and, in benchCrash, a crash with a
// real restart) on real pods, lockwarden and client-go
// leader election side by side on one node in one run, in the same Deployment shape (3
// replicas, lease 4 s): delete the holder pod (graceful, as `kubectl delete pod`), then time
// until the next holder is published (lockwarden: the DistributedLock's status as watched;
// client-go: the Lease's holderIdentity, read every 10 ms). Run with `make bench-node`
// (-benchtime 10x); it reports p50 and p99 in milliseconds.
func BenchmarkHandoffRealPods(b *testing.B) {
	if _, err := os.Stat(filepath.Join(repoRoot(b), "bin", "images", "leworker.tar")); err != nil {
		b.Fatalf("bin/images/leworker.tar not found: run `make image`")
	}
	n := startNode(b, "lockwarden-e2e-bench")
	c := deploy(b, n)
	ctx := context.Background()
	if out, err := n.kubectl(ctx, "apply", "-f", filepath.Join("test", "e2e", "testdata", "leworker", "leworker.yaml")); err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	if out, err := n.kubectl(ctx, "-n", "le-demo", "rollout", "status", "deployment/leworker", "--timeout=120s"); err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	b.Run("lockwarden", func(b *testing.B) {
		var ds []time.Duration
		for range b.N {
			l := c.steady(b)
			tok := l.Status.FencingToken
			t0 := time.Now()
			if err := n.kube.CoreV1().Pods(workerNS).Delete(ctx, l.Status.Holder, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
			c.rec.waitLock(b, lockName, time.Minute, "next holder", func(l *lockv1.DistributedLock) bool {
				return isHeld(l) && l.Status.FencingToken > tok
			})
			ds = append(ds, time.Since(t0))
		}
		report(b, ds)
	})
	b.Run("client-go", func(b *testing.B) {
		var ds []time.Duration
		for range b.N {
			holder := c.leaseSteady(b)
			t0 := time.Now()
			if err := n.kube.CoreV1().Pods("le-demo").Delete(ctx, holder, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
			eventuallyFast(b, time.Minute, "next Lease holder", func() bool {
				h := c.leaseHolder(b)
				return h != "" && h != holder
			})
			ds = append(ds, time.Since(t0))
		}
		report(b, ds)
	})
	benchCrash(b, n, c)
}

// benchCrash measures a crash with a real restart (SIGKILL of the holder's process,
// restartPolicy Always) on the same node, lockwarden and client-go side by side: the time
// from the kill until a live process leads again. lockwarden: the lock Held again after the
// crash was seen (the same pod back once Ready, or the next pod after the lock delay, since a
// container the kubelet is about to restart is no proof that the process stopped). client-go:
// the Lease renewed after the kill (a SIGKILLed process renews nothing, so the renewal is the
// restarted process's, which keeps its identity and leads at once, or another pod's). After
// each sample the crashed pod is deleted, so that every sample is a first crash (the kubelet's
// restart back-off grows with each crash of one container).
func benchCrash(b *testing.B, n *node, c *cluster) {
	ctx := context.Background()
	b.Run("crash/lockwarden", func(b *testing.B) {
		var ds []time.Duration
		for range b.N {
			l := c.steady(b)
			tok, holder := l.Status.FencingToken, l.Status.Holder
			pid := c.containerPID(b, c.getPod(b, workerNS, holder))
			m, t0 := c.rec.mark(), time.Now()
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				b.Fatalf("kill the holder's process %d: %v", pid, err)
			}
			c.rec.waitLock(b, lockName, 2*time.Minute, "Held again after the crash", func(l *lockv1.DistributedLock) bool {
				_, locks := c.rec.since(m)
				tm, _ := termOfNoFail(terms(locks), tok)
				return isHeld(l) && (l.Status.FencingToken > tok || !tm.ReleasingAt.IsZero())
			})
			ds = append(ds, time.Since(t0))
			c.deleteAndSettle(b, workerNS, holder)
		}
		report(b, ds)
	})
	b.Run("crash/client-go", func(b *testing.B) {
		var ds []time.Duration
		for range b.N {
			holder := c.leaseSteady(b)
			pid := c.containerPID(b, c.getPod(b, "le-demo", holder))
			t0 := time.Now()
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				b.Fatalf("kill the leader's process %d: %v", pid, err)
			}
			eventuallyFast(b, 2*time.Minute, "a Lease renewal after the kill", func() bool {
				l, err := n.kube.CoordinationV1().Leases("le-demo").Get(ctx, "leworker", metav1.GetOptions{})
				return err == nil && l.Spec.RenewTime != nil && l.Spec.RenewTime.After(t0)
			})
			ds = append(ds, time.Since(t0))
			c.deleteAndSettle(b, "le-demo", holder)
		}
		report(b, ds)
	})
}

// deleteAndSettle deletes the pod and waits until it is gone, so that the Deployment's
// replacement starts with no restart back-off.
func (c *cluster) deleteAndSettle(t testing.TB, ns, name string) {
	t.Helper()
	ctx := context.Background()
	if err := c.n.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s/%s: %v", ns, name, err)
	}
	eventually(t, 2*time.Minute, "pod "+ns+"/"+name+" gone", func() bool {
		_, err := c.n.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// leaseSteady waits until three leworker pods are Ready and the Lease has a holder among them.
func (c *cluster) leaseSteady(t testing.TB) string {
	t.Helper()
	var holder string
	eventually(t, 2*time.Minute, "3 Ready leworker pods and a Lease holder", func() bool {
		ready := map[string]bool{}
		for _, p := range c.pods(t, "le-demo", "app=leworker") {
			if podReady(&p) {
				ready[p.Name] = true
			}
		}
		holder = c.leaseHolder(t)
		return len(ready) == 3 && ready[holder]
	})
	return holder
}

// leaseHolder is the Lease's holderIdentity ("" when released or absent).
func (c *cluster) leaseHolder(t testing.TB) string {
	l, err := c.n.kube.CoordinationV1().Leases("le-demo").Get(context.Background(), "leworker", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// eventuallyFast is eventually with a 10 ms period, for measurements.
func eventuallyFast(t testing.TB, timeout time.Duration, desc string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %v", desc, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// report records p50 and p99 of ds (ms) and logs every sample.
func report(b *testing.B, ds []time.Duration) {
	b.Helper()
	s := slices.Clone(ds)
	slices.Sort(s)
	q := func(p float64) float64 {
		return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(0.50), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
	b.Logf("%d handoffs: %v", len(ds), ds)
}
