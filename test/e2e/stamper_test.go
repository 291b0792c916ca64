//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// test/e2e/testdata/stamper: the controller-runtime after-program of docs/migration.md.
const (
	stamperNS    = "stamper-demo"
	stamperLock  = "configmap-stamper"
	stampedCM    = "stamped"
	stamperDelay = 15 * time.Second // lock.yaml: the lock delay is the lease
	writerAnn    = "example.com/reconciled-by"
	tokenAnn     = "example.com/fencing-token"
)

// scenarioStamper: the operator of examples/migrate/controller-runtime/after, whose
// controller-runtime manager elects through leadership.ResourceLock with ReleaseOnStop, on
// real pods. Deleting the holder pod: the manager stops its controllers, RunManager confirms
// the release, and the next pod is granted without the lock delay and stamps the ConfigMap
// with a higher token; the old holder stamps nothing after that. Then the holder's readiness
// probe fails while its process runs on: it loses the lock, and RunManager builds a new
// manager in the same process, which campaigns, leads again and stamps with a new token.
func scenarioStamper(t *testing.T, c *cluster, r *e2eReport) {
	if _, err := os.Stat(filepath.Join(c.n.root, "bin", "images", "stamper.tar")); err != nil {
		t.Fatalf("bin/images/stamper.tar not found: run `make image`")
	}
	ctx := ctxFor(t, 10*time.Minute)
	// lockwarden-lock-reader grants patch for the holder-release: only with the policy
	// that admits it from the holder alone (config/rbac/lock_reader_role.yaml)
	if out, err := c.n.kubectl(ctx, "apply", "-k", "config/policy"); err != nil {
		t.Fatalf("kubectl apply -k config/policy: %v\n%s", err, out)
	}
	c.n.waitLockAdmission(t)
	t.Cleanup(func() {
		if t.Failed() { // the operator's own account, before the node goes
			for _, p := range c.pods(t, stamperNS, "app=stamper") {
				logs, _ := c.n.kubectl(context.Background(), "-n", stamperNS, "logs", p.Name)
				t.Logf("logs of %s:\n%s", p.Name, lastLines(logs, 15))
			}
		}
	})
	rec := startRecorder(t, c.n, stamperNS)
	stamps := watchStamps(t, c)
	start := time.Now()
	if out, err := c.n.kubectl(ctx, "apply", "-k", "test/e2e/testdata/stamper"); err != nil {
		t.Fatalf("kubectl apply -k test/e2e/testdata/stamper: %v\n%s", err, out)
	}
	if out, err := c.n.kubectl(ctx, "-n", stamperNS, "rollout", "status", "deployment/stamper", "--timeout=180s"); err != nil {
		t.Fatalf("the stamper did not roll out: %v\n%s\n%s", err, out, c.describe(ctx, stamperNS))
	}
	l := rec.waitLock(t, stamperLock, time.Minute, "holder", isHeld)
	first := stamps.waitStamp(t, 0, l.Status.Holder, l.Status.FencingToken, time.Minute)
	r.add("stamper: applied at 0; lock Held by %s (token %d); the ConfigMap stamped by it with that token %s",
		l.Status.Holder, l.Status.FencingToken, ms(first.At.Sub(start)))

	stamperDeleteHolder(t, c, rec, stamps, r)
	stamperLoseReadiness(t, c, rec, stamps, r)

	_, locks := rec.since(mark{})
	t.Logf("stamper terms:\n%s", summary(terms(locks)))
	for _, v := range chaos.CheckTokens(statusObs(locks)) {
		t.Errorf("stamper tokens: %s", v)
	}
	all, _ := stamps.since(0)
	for _, b := range checkStamps(all, "", 0, time.Time{}) {
		t.Errorf("stamps over the whole scenario: %s", b)
	}
}

// stamperSteady waits until the stamper's lock is Held and three stamper pods are Ready.
func stamperSteady(t testing.TB, c *cluster, rec *recorder) *lockv1.DistributedLock {
	t.Helper()
	var l *lockv1.DistributedLock
	ready := 0
	if !poll(2*time.Minute, func() bool {
		ready = 0
		for _, p := range c.pods(t, stamperNS, "app=stamper") {
			if podReady(&p) {
				ready++
			}
		}
		l = rec.lastLock(stamperLock)
		return ready == 3 && l != nil && isHeld(l)
	}) {
		t.Fatalf("no steady stamper (3 Ready pods, lock Held) within 2 minutes: %d Ready, lock %s\n%s",
			ready, describeLock(l), c.describe(context.Background(), stamperNS))
	}
	return l
}

// stamperDeleteHolder: `kubectl delete pod` of the holder; the term must end HolderReleased.
func stamperDeleteHolder(t *testing.T, c *cluster, rec *recorder, stamps *stampWatch, r *e2eReport) {
	l := stamperSteady(t, c, rec)
	holder, uid, tok := l.Status.Holder, string(l.Status.HolderUID), l.Status.FencingToken
	m := rec.mark()
	_, si := stamps.since(0)
	t0 := time.Now()
	if out, err := c.n.kubectl(ctxFor(t, time.Minute), "-n", stamperNS, "delete", "pod", holder, "--wait=false"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	next := rec.waitLock(t, stamperLock, time.Minute, "next holder", func(l *lockv1.DistributedLock) bool {
		return isHeld(l) && l.Status.FencingToken > tok
	})
	newStamp := stamps.waitStamp(t, si, next.Status.Holder, next.Status.FencingToken, time.Minute)
	pods, locks := rec.since(m)
	tm, nt := termOf(t, terms(locks), tok)
	if nt == nil {
		t.Fatalf("no term after %v", tm)
	}
	if tm.Reason != lockv1.ReasonHolderReleased {
		t.Errorf("term %v: want it ended %s (RunManager's release after the manager stopped)", tm, lockv1.ReasonHolderReleased)
	}
	if !tm.ReleasingAt.IsZero() {
		if gap := nt.GrantedAt.Sub(tm.ReleasingAt); gap >= stamperDelay-watchSlack {
			t.Errorf("next term %v granted %v after Releasing: the lock delay, not the release", nt, gap.Round(time.Millisecond))
		}
	}
	ss, _ := stamps.since(si)
	for _, b := range checkStamps(ss, holder, tok, nt.GrantedAt) {
		t.Error(b)
	}
	var terminal time.Time
	for _, p := range podEvents(pods, uid) {
		if terminal.IsZero() && allTerminated(p.Pod) {
			terminal = p.At
		}
	}
	at := func(x time.Time) string {
		if x.IsZero() {
			return "never"
		}
		return ms(x.Sub(t0))
	}
	r.add("stamper delete-holder: kubectl delete at 0; Releasing published %s; holder-release annotation seen %s; term token %d ended %s; next holder %s (token %d) granted %s; first stamp by it %s; the old pod's containers terminated %s",
		at(tm.ReleasingAt), at(releaseSeen(locks, tok)), tok, tm.Reason, next.Status.Holder, next.Status.FencingToken,
		at(nt.GrantedAt), at(newStamp.At), at(terminal))
	r.file("watch-stamper-delete.txt", timeline(podEvents(pods, uid), locks, t0))
}

// stamperLoseReadiness: the holder's probe port dropped inside its pod (iptables) while its
// process runs on: the term ends, the manager loses the lock and RunManager builds a new one
// in the same process (restartCount unchanged), which leads again once the pod is the oldest
// Ready candidate and stamps with a new token.
func stamperLoseReadiness(t *testing.T, c *cluster, rec *recorder, stamps *stampWatch, r *e2eReport) {
	l := stamperSteady(t, c, rec)
	holder, uid, tok := l.Status.Holder, string(l.Status.HolderUID), l.Status.FencingToken
	pod := c.getPod(t, stamperNS, holder)
	restarts := pod.Status.ContainerStatuses[0].RestartCount
	pid := c.containerPID(t, pod)
	rule := []string{"INPUT", "-p", "tcp", "--dport", "8081", "-j", "DROP"}
	m := rec.mark()
	_, si := stamps.since(0)
	t0 := time.Now()
	if err := podInNetns(pid, append([]string{"iptables", "-I"}, rule...)...); err != nil {
		t.Fatalf("drop the holder's probe port: %v", err)
	}
	blocked := true
	unblock := func() {
		if blocked {
			blocked = false
			if err := podInNetns(pid, append([]string{"iptables", "-D"}, rule...)...); err != nil {
				t.Errorf("restore the probe port: %v", err)
			}
		}
	}
	t.Cleanup(unblock)
	next := rec.waitLock(t, stamperLock, 90*time.Second, "next term", func(l *lockv1.DistributedLock) bool {
		return isHeld(l) && l.Status.FencingToken > tok
	})
	unblock()
	_, locks := rec.since(m)
	tm, nt := termOf(t, terms(locks), tok)
	// a process that runs on neither stops nor releases: Releasing, then the lock delay
	if tm.Reason == lockv1.ReasonHolderReleased || tm.Reason == lockv1.ReasonHolderTerminated {
		t.Errorf("term %v: the holder's process ran on, so neither a release nor the kubelet ended it", tm)
	}
	if tm.ReleasingAt.IsZero() || nt == nil {
		t.Fatalf("term %v ended without Releasing, or no next term:\n%s", tm, summary(terms(locks)))
	}
	if gap := nt.GrantedAt.Sub(tm.ReleasingAt); gap < stamperDelay-watchSlack {
		t.Errorf("next term %v granted %v after Releasing, want at least the lock delay %v", nt, gap.Round(time.Millisecond), stamperDelay)
	}
	ss, _ := stamps.since(si)
	for _, b := range checkStamps(ss, holder, tok, nt.GrantedAt) {
		t.Error(b)
	}
	// the same process campaigns again: move the lock back to it by deleting the holders
	// granted after it (each a released handoff)
	for i := 0; i < 4; i++ {
		cur := rec.lastLock(stamperLock)
		if string(cur.Status.HolderUID) == uid && isHeld(cur) {
			break
		}
		stamperSteady(t, c, rec)
		cur = rec.lastLock(stamperLock)
		if string(cur.Status.HolderUID) == uid {
			break
		}
		if out, err := c.n.kubectl(ctxFor(t, time.Minute), "-n", stamperNS, "delete", "pod", cur.Status.Holder, "--wait=false"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		rec.waitLock(t, stamperLock, time.Minute, "next holder", func(l *lockv1.DistributedLock) bool {
			return isHeld(l) && l.Status.FencingToken > cur.Status.FencingToken
		})
	}
	again := rec.lastLock(stamperLock)
	if string(again.Status.HolderUID) != uid {
		t.Fatalf("the pod %s that lost the lock does not hold it again: %s", holder, describeLock(again))
	}
	back := stamps.waitStamp(t, si, holder, again.Status.FencingToken, time.Minute)
	after := c.getPod(t, stamperNS, holder).Status.ContainerStatuses[0].RestartCount
	if after != restarts {
		prev, _ := c.n.kubectl(ctxFor(t, time.Minute), "-n", stamperNS, "logs", holder, "--previous")
		t.Errorf("restartCount of %s went from %d to %d: the process did not survive losing the lock; its previous logs end:\n%s",
			holder, restarts, after, lastLines(prev, 12))
	}
	logs, err := c.n.kubectl(ctxFor(t, time.Minute), "-n", stamperNS, "logs", holder)
	if err != nil {
		t.Errorf("logs of %s: %v", holder, err)
	}
	if !strings.Contains(logs, "lost the lock; campaigning again") {
		t.Errorf("the logs of %s do not show RunManager campaigning again:\n%s", holder, lastLines(logs, 12))
	}
	ss, _ = stamps.since(si)
	for _, b := range checkStamps(ss, "", 0, time.Time{}) {
		t.Error(b)
	}
	r.add("stamper readiness-fails: probe port of %s dropped at 0; %v, Releasing %s, next term (token %d, %s) %s after Releasing; restartCount %d -> %d; it led again with token %d and stamped %s",
		holder, tm, ms(tm.ReleasingAt.Sub(t0)), nt.Token, next.Status.Holder, ms(nt.GrantedAt.Sub(tm.ReleasingAt)), restarts, after, again.Status.FencingToken, ms(back.At.Sub(t0)))
}
