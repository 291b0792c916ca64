//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// BenchmarkHandoffRealPods measures a planned handoff on real pods, lockwarden and client-go
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
