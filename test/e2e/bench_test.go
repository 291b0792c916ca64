//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// BenchmarkHandoffRealPods measures handoffs on real pods, lockwarden and client-go's leader
// election side by side on one node in one run (`make bench-node`, BENCH_SAMPLES samples a
// row, default 20; BENCH_ROWS=<row>,... measures only those rows; run it with -benchtime 1x).
// Both run in the same Deployment shape: 3
// replicas, grace period 15 s, the work writing every 500 ms. Every row ends at the new
// leader's first accepted write: for lockwarden the ledger's acceptance of a fenced append
// with the new token, for client-go (which hands out no token) the first write its new leader
// sends to the test's sink.
//
//   - planned, with release: `kubectl delete pod` of the holder (the API call); lockwarden's
//     fenced-worker confirms its release once its work stopped (its default), client-go's
//     leworker gives the Lease up on SIGTERM (ReleaseOnCancel);
//   - planned, without release: the same deletion; lockwarden waits for the kubelet's terminal
//     update (attested), client-go for the Lease to expire;
//   - crash: SIGKILL of the holder's process (restartPolicy Always, a real restart), to a live
//     leader writing again: lockwarden gives the restarted pod a new term with a new token
//     (one container: proof the old process is gone), client-go's restarted process renews
//     the Lease it still holds. The crashed pod is deleted after each sample, so that every
//     sample is a first crash (the kubelet's back-off grows with each crash of one container).
//
// client-go runs at its defaults (LeaseDuration 15 s, RenewDeadline 10 s, RetryPeriod 2 s) and
// at 4 s / 3 s / 1 s; the lock's lease is 4 s and its delay 6 s (test/e2e/testdata/worker).
// The last line is
//
//	summary: planned_p50_ms=<n> planned_ratio_defaults=<x> planned_ratio_fast=<x> crash_ratio=<x>
//
// with ratios client-go's p50 over lockwarden's (higher is better): planned with release, and
// the crash against client-go at the lock's lease duration (4 s).
func BenchmarkHandoffRealPods(b *testing.B) {
	if _, err := os.Stat(filepath.Join(repoRoot(b), "bin", "images", "leworker.tar")); err != nil {
		b.Fatalf("bin/images/leworker.tar not found: run `make image`")
	}
	samples := 20
	if v := os.Getenv("BENCH_SAMPLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("BENCH_SAMPLES=%q: want a positive number", v)
		}
		samples = n
	}
	n := startNode(b, "lockwarden-e2e-bench")
	c := deploy(b, n)
	if out, err := n.kubectl(ctxFor(b, time.Minute), "apply", "-f", filepath.Join("test", "e2e", "testdata", "leworker", "leworker.yaml")); err != nil {
		b.Fatalf("%v\n%s", err, out)
	}
	res := map[string][]time.Duration{}
	only := map[string]bool{} // BENCH_ROWS: a comma-separated subset of rows (default all)
	for _, r := range strings.Split(os.Getenv("BENCH_ROWS"), ",") {
		if r != "" {
			only[r] = true
		}
	}
	run := func(row string, sample func() time.Duration) {
		if len(only) > 0 && !only[row] {
			return
		}
		for i := range samples {
			d := sample()
			res[row] = append(res[row], d)
			fmt.Printf("%s sample %d/%d: %v\n", row, i+1, samples, d.Round(time.Millisecond))
		}
	}
	c.setWorkerRelease(b, true)
	run("lw/planned-release", func() time.Duration { return c.lwPlanned(b) })
	run("lw/crash", func() time.Duration { return c.lwCrash(b) })
	c.setWorkerRelease(b, false)
	run("lw/planned-attested", func() time.Duration { return c.lwPlanned(b) })
	for _, cfg := range clientGoConfigs {
		c.setLeworker(b, cfg, true)
		run("cg-"+cfg.name+"/planned-release", func() time.Duration { return c.cgPlanned(b) })
		run("cg-"+cfg.name+"/crash", func() time.Duration { return c.cgCrash(b) })
		c.setLeworker(b, cfg, false)
		run("cg-"+cfg.name+"/planned-attested", func() time.Duration { return c.cgPlanned(b) })
	}
	table, summary := benchReport(res)
	fmt.Print(table)
	fmt.Println(summary)
	b.ReportMetric(0, "ns/op")
}

// clientGoConfig is one set of client-go timings.
type clientGoConfig struct {
	name                 string
	lease, renew, period time.Duration
}

var clientGoConfigs = []clientGoConfig{
	{"defaults", 15 * time.Second, 10 * time.Second, 2 * time.Second},
	{"fast", 4 * time.Second, 3 * time.Second, time.Second},
}

// benchReport prints the six rows side by side and the summary line.
func benchReport(res map[string][]time.Duration) (string, string) {
	p := func(row string, q float64) time.Duration {
		s := slices.Clone(res[row])
		if len(s) == 0 {
			return 0
		}
		slices.Sort(s)
		return s[min(len(s)-1, int(q*float64(len(s))))]
	}
	ratio := func(cg, lw string) float64 {
		if p(lw, 0.5) == 0 {
			return 0
		}
		return float64(p(cg, 0.5)) / float64(p(lw, 0.5))
	}
	var b strings.Builder
	b.WriteString("| row | client-go timings | lockwarden p50 / p99 | client-go p50 / p99 | client-go / lockwarden (p50) |\n| --- | --- | ---: | ---: | ---: |\n")
	kinds := []struct{ kind, what string }{
		{"planned-release", "planned handoff, with release"},
		{"planned-attested", "planned handoff, without release"},
		{"crash", "crash with a real restart"},
	}
	for _, k := range kinds {
		for _, cfg := range clientGoConfigs {
			lw, cg := "lw/"+k.kind, "cg-"+cfg.name+"/"+k.kind
			fmt.Fprintf(&b, "| %s | %v / %v / %v | %s / %s | %s / %s | %.2fx |\n", k.what, cfg.lease, cfg.renew, cfg.period,
				msOf(p(lw, 0.5)), msOf(p(lw, 0.99)), msOf(p(cg, 0.5)), msOf(p(cg, 0.99)), ratio(cg, lw))
		}
	}
	fmt.Fprintf(&b, "(%d samples a row; p99 of so few samples is their maximum)\n", len(res["lw/planned-release"]))
	summary := fmt.Sprintf("summary: planned_p50_ms=%d planned_ratio_defaults=%.2f planned_ratio_fast=%.2f crash_ratio=%.2f",
		p("lw/planned-release", 0.5).Milliseconds(), ratio("cg-defaults/planned-release", "lw/planned-release"),
		ratio("cg-fast/planned-release", "lw/planned-release"), ratio("cg-fast/crash", "lw/crash"))
	return b.String(), summary
}

func msOf(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + " ms" }

// setWorkerRelease rolls the fenced-worker out with --release-on-stop set as asked.
func (c *cluster) setWorkerRelease(t testing.TB, on bool) {
	t.Helper()
	c.setArgs(t, workerNS, "fenced-worker", []string{"--probe-address=:8081", "--release-on-stop=" + strconv.FormatBool(on)})
	c.steady(t)
}

// setLeworker rolls the client-go workers out with cfg's timings and ReleaseOnCancel.
func (c *cluster) setLeworker(t testing.TB, cfg clientGoConfig, release bool) {
	t.Helper()
	c.setArgs(t, "le-demo", "leworker", []string{"--lease-duration=" + cfg.lease.String(), "--renew-deadline=" + cfg.renew.String(),
		"--retry-period=" + cfg.period.String(), "--release-on-cancel=" + strconv.FormatBool(release)})
	c.leaseSteady(t)
}

// setArgs replaces the first container's args of a Deployment and waits for the rollout.
func (c *cluster) setArgs(t testing.TB, ns, name string, args []string) {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/template/spec/containers/0/args","value":%s}]`, b)
	if out, err := c.n.kubectl(ctxFor(t, time.Minute), "-n", ns, "patch", "deployment/"+name, "--type=json", "-p", patch); err != nil {
		t.Fatalf("patch %s/%s: %v\n%s", ns, name, err, out)
	}
	if out, err := c.n.kubectl(ctxFor(t, 4*time.Minute), "-n", ns, "rollout", "status", "deployment/"+name, "--timeout=200s"); err != nil {
		t.Fatalf("rollout of %s/%s: %v\n%s", ns, name, err, out)
	}
}

// lwPlanned: delete the holder, until the next holder's first accepted fenced write.
func (c *cluster) lwPlanned(t testing.TB) time.Duration {
	l := c.steady(t)
	tok := l.Status.FencingToken
	m, t0 := c.rec.mark(), time.Now()
	if err := c.n.kube.CoreV1().Pods(workerNS).Delete(context.Background(), l.Status.Holder, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	d := c.firstFencedWrite(t, tok, t0)
	_, locks := c.rec.since(m)
	if tm, ok := termNoFail(terms(locks), tok); ok {
		fmt.Printf("  lw/planned: Releasing %s, ended %s, next term %s\n", sinceOr(tm.ReleasingAt, t0), tm.Reason, sinceOr(tm.EndedAt, t0))
	}
	return d
}

// termNoFail is the recorded term of token, if any.
func termNoFail(ts []term, token int64) (term, bool) {
	for _, tm := range ts {
		if tm.Token == token {
			return tm, true
		}
	}
	return term{}, false
}

// lwCrash: SIGKILL the holder's process, until a live leader's first accepted write with a
// new token; then the crashed pod is deleted.
func (c *cluster) lwCrash(t testing.TB) time.Duration {
	l := c.steady(t)
	tok, holder := l.Status.FencingToken, l.Status.Holder
	pid := c.containerPID(t, c.getPod(t, workerNS, holder))
	m, t0 := c.rec.mark(), time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the holder's process %d: %v", pid, err)
	}
	d := c.firstFencedWrite(t, tok, t0)
	fmt.Printf("  lw/crash: %s\n", c.crashSteps(holder, tok, m, t0))
	c.deleteAndSettle(t, workerNS, holder)
	return d
}

// crashSteps says, from the recording since m, when the kubelet reported the crash and the
// restarted container (running, then Ready), and when the lock went Releasing and to the next
// term, each from t0.
func (c *cluster) crashSteps(holder string, tok int64, m mark, t0 time.Time) string {
	pods, locks := c.rec.since(m)
	var crashed, running, ready, releasing, granted time.Time
	restarted := false
	for _, o := range pods {
		if o.Pod.Name != holder || len(o.Pod.Status.ContainerStatuses) == 0 {
			continue
		}
		cs := o.Pod.Status.ContainerStatuses[0]
		switch {
		case crashed.IsZero() && cs.State.Terminated != nil:
			crashed = o.At
		case running.IsZero() && cs.RestartCount > 0 && cs.State.Running != nil:
			running, restarted = o.At, true
		}
		if restarted && ready.IsZero() && podReady(o.Pod) {
			ready = o.At
		}
	}
	for _, o := range locks {
		st := o.Lock.Status
		if releasing.IsZero() && st.FencingToken == tok && st.Phase == lockv1.PhaseReleasing {
			releasing = o.At
		}
		if granted.IsZero() && st.FencingToken > tok && st.Phase == lockv1.PhaseHeld {
			granted = o.At
		}
	}
	return fmt.Sprintf("terminated %s, Releasing %s, running again %s, Ready %s, next term %s", sinceOr(crashed, t0), sinceOr(releasing, t0),
		sinceOr(running, t0), sinceOr(ready, t0), sinceOr(granted, t0))
}

// firstFencedWrite waits for the first append the ledger accepted after t0 with a token
// above tok, and returns its acceptance time minus t0.
func (c *cluster) firstFencedWrite(t testing.TB, tok int64, t0 time.Time) time.Duration {
	var at time.Time
	eventuallyFast(t, 2*time.Minute, "a write with a token above "+strconv.FormatInt(tok, 10), func() bool {
		for _, o := range c.outcomes(t) {
			if o.Op == "append" && o.Accepted && o.Token > tok && o.At.After(t0) {
				at = o.At
				return true
			}
		}
		return false
	})
	return at.Sub(t0)
}

// cgPlanned: delete the Lease holder, until another pod's first write.
func (c *cluster) cgPlanned(t testing.TB) time.Duration {
	holder := c.leaseSteady(t)
	t0 := time.Now()
	if err := c.n.kube.CoreV1().Pods("le-demo").Delete(context.Background(), holder, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	at := c.cg.first(t, t0, func(w string) bool { return w != holder })
	return at.Sub(t0)
}

// cgCrash: SIGKILL the Lease holder's process, until a live leader writes again (the
// restarted process, which keeps its identity, or another pod); then the pod is deleted.
func (c *cluster) cgCrash(t testing.TB) time.Duration {
	holder := c.leaseSteady(t)
	pid := c.containerPID(t, c.getPod(t, "le-demo", holder))
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the leader's process %d: %v", pid, err)
	}
	// The killed process's last write may still land just after the kill: count only writes
	// sent by a process started after it (a new leader's first write is sent at once).
	killed := time.Now().Add(50 * time.Millisecond)
	at := c.cg.first(t, killed, func(string) bool { return true })
	c.deleteAndSettle(t, "le-demo", holder)
	return at.Sub(t0)
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

// leaseSteady waits until three leworker pods are Ready, the Lease has a holder among them
// and that holder has written in the last second.
func (c *cluster) leaseSteady(t testing.TB) string {
	t.Helper()
	var holder string
	eventually(t, 3*time.Minute, "3 Ready leworker pods and a writing Lease holder", func() bool {
		ready := map[string]bool{}
		for _, p := range c.pods(t, "le-demo", "app=leworker") {
			if podReady(&p) {
				ready[p.Name] = true
			}
		}
		holder = c.leaseHolder(t)
		return len(ready) == 3 && ready[holder] && c.cg.wroteSince(holder, time.Now().Add(-time.Second))
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

// writeSink records the client-go workers' writes: who, and when this process received them.
type writeSink struct {
	mu     sync.Mutex
	writes []sinkWrite
}

type sinkWrite struct {
	writer string
	at     time.Time
}

func (s *writeSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := time.Now()
	var req struct {
		Writer string `json:"writer"`
	}
	if r.Method != http.MethodPost || json.NewDecoder(r.Body).Decode(&req) != nil || req.Writer == "" {
		http.Error(w, `want POST {"writer": "<pod>"}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.writes = append(s.writes, sinkWrite{req.Writer, at})
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// first waits for the first write received after t0 from a writer ok accepts.
func (s *writeSink) first(t testing.TB, t0 time.Time, ok func(string) bool) time.Time {
	t.Helper()
	var at time.Time
	eventuallyFast(t, 2*time.Minute, "a client-go leader's write", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, w := range s.writes {
			if w.at.After(t0) && ok(w.writer) {
				at = w.at
				return true
			}
		}
		return false
	})
	return at
}

func (s *writeSink) wroteSince(writer string, since time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.writes) - 1; i >= 0 && s.writes[i].at.After(since); i-- {
		if s.writes[i].writer == writer {
			return true
		}
	}
	return false
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
