//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// watchSlack allows for the two watch deliveries between the controller's writes and this
// process when a gap is compared with the lock delay.
const watchSlack = time.Second

// termOf returns the term with token, and the one after it.
func termOf(t testing.TB, ts []term, token int64) (term, *term) {
	t.Helper()
	for i, tm := range ts {
		if tm.Token == token {
			if i+1 < len(ts) {
				return tm, &ts[i+1]
			}
			return tm, nil
		}
	}
	t.Fatalf("no term with token %d recorded:\n%s", token, summary(ts))
	return term{}, nil
}

// scenarioDeleteHolder: `kubectl delete pod` of the holder, on the shipped path: the
// fenced-worker confirms its own release once its work stopped (its default), so the term
// ends HolderReleased and the next holder is granted without waiting for the kubelet. The
// handoff is traced step by step (trace_test.go) up to the next holder's first accepted
// fenced write.
func scenarioDeleteHolder(t *testing.T, c *cluster, r *e2eReport) {
	h := c.plannedHandoff(t, r, "delete-holder")
	if h.ended.Reason != lockv1.ReasonHolderReleased {
		t.Errorf("term %v: want it ended %s (the worker confirms its release by default)", h.ended, lockv1.ReasonHolderReleased)
	}
}

// scenarioDeleteHolderAttested: the same deletion with a worker that does not confirm its
// release (--release-on-stop=false, set by the rollout scenario before it): the kubelet's
// terminal-phase update attests that the holder stopped, and the next holder is granted
// within one reconcile of it.
func scenarioDeleteHolderAttested(t *testing.T, c *cluster, r *e2eReport) {
	h := c.plannedHandoff(t, r, "delete-holder-attested")
	if h.ended.Reason != lockv1.ReasonHolderTerminated {
		t.Errorf("term %v: want it ended %s (attested by the kubelet's terminal update)", h.ended, lockv1.ReasonHolderTerminated)
	}
	if h.terminal.IsZero() {
		t.Fatalf("no terminal-phase update of %s was recorded before the next grant", h.holder)
	}
	r.add("delete-holder-attested: the next grant came %s after the kubelet's terminal update", ms(h.next.GrantedAt.Sub(h.terminal)))
}

// handoff is what plannedHandoff recorded.
type handoff struct {
	holder          string
	ended           term
	next            *term
	terminal        time.Time // the kubelet's terminal update of the old holder (zero: not seen)
	firstWrite      time.Time
	t0              time.Time
	firstWriteToken int64
}

// plannedHandoff deletes the holder pod as `kubectl delete pod` does (the API call itself, so
// that its send and answer are timed here), waits for the next holder's first accepted write,
// and reports the trace of the handoff under name.
func (c *cluster) plannedHandoff(t *testing.T, r *e2eReport, name string) handoff {
	l := c.steady(t)
	holder, uid, tok := l.Status.Holder, string(l.Status.HolderUID), l.Status.FencingToken
	tail := c.followLogs(t, workerNS, holder)
	m, t0 := c.rec.mark(), time.Now()
	if err := c.n.kube.CoreV1().Pods(workerNS).Delete(ctxFor(t, time.Minute), holder, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete pod %s: %v", holder, err)
	}
	accepted := time.Now()
	next := c.rec.waitLock(t, lockName, time.Minute, "next holder", func(l *lockv1.DistributedLock) bool {
		return isHeld(l) && l.Status.FencingToken > tok
	})
	h := handoff{holder: holder, t0: t0}
	eventually(t, 30*time.Second, "the next holder's first accepted write", func() bool {
		var ok bool
		h.firstWriteToken, h.firstWrite, ok = c.firstAccepted(t, string(next.Status.HolderUID), next.Status.FencingToken, t0)
		return ok
	})
	// the old holder's pod gone: its log is complete, and the kubelet's terminal update seen
	eventually(t, time.Minute, "the old holder's pod deleted", func() bool {
		_, err := c.n.kube.CoreV1().Pods(workerNS).Get(context.Background(), holder, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	old := tail.lines()
	pods, locks := c.rec.since(m)
	var deleted time.Time
	for _, p := range podEvents(pods, uid) {
		if h.terminal.IsZero() && (p.Pod.Status.Phase == corev1.PodSucceeded || p.Pod.Status.Phase == corev1.PodFailed) && allTerminated(p.Pod) {
			h.terminal = p.At
		}
		if p.Type == "DELETED" {
			deleted = p.At
		}
	}
	var nt *term
	h.ended, nt = termOf(t, terms(locks), tok)
	if nt == nil {
		t.Fatalf("no term after %v", h.ended)
	}
	h.next = nt
	var releaseSeen, statusSeen time.Time
	for _, o := range locks {
		if releaseSeen.IsZero() && strings.HasPrefix(o.Lock.Annotations[lockv1.AnnotationHolderRelease], uid+"/") {
			releaseSeen = o.At
		}
		if statusSeen.IsZero() && o.Lock.Status.FencingToken == nt.Token {
			statusSeen = o.At
		}
	}
	mgr := managerLines(c.podLog(t, managerNS, c.managerPodOf(t, c.activeManager(t))))
	key := workerNS + "/" + lockName
	nextLog := c.podLog(t, workerNS, nt.Holder)
	released := firstWorker(old, t0, "release sent")
	after := released // the turn that ends the term: after the release, or (attested) after t0
	if after.IsZero() {
		after = t0
	}
	releasingWritten := firstManager(mgr, t0, key, "status written", func(e managerEntry) bool {
		return e.Token == tok && e.Phase == string(lockv1.PhaseReleasing)
	})
	steps := []traceStep{
		{"delete sent", "test", t0},
		{"delete accepted (API answer)", "test", accepted},
		{"kubelet: Killing container with a grace period (SIGTERM next)", "kubelet log", c.kubeletKill(t, holder, t0)},
		{"holder: SIGTERM received", "holder log", firstWorker(old, t0, "SIGTERM received")},
		{"holder: work stopped", "holder log", firstWorker(old, t0, "work stopped under token")},
		{"holder: release sent", "holder log", released},
		{"holder: release admitted", "holder log", firstWorker(old, t0, `"released"`, `"status"=200`)},
		{"holder-release annotation on the lock", "test watch", releaseSeen},
		{"controller: turn on the deletion starts", "manager log", lastBefore(mgr, releasingWritten, key, "turn")},
		{"controller: Releasing written", "manager log", releasingWritten},
		{"controller: turn that ends the term starts", "manager log", lastBefore(mgr, firstManager(mgr, after, key, "etcd term ended", nil), key, "turn")},
		{"controller: etcd term ended", "manager log", firstManager(mgr, after, key, "etcd term ended", nil)},
		{fmt.Sprintf("controller: etcd grant committed (token %d)", nt.Token), "manager log", firstManager(mgr, t0, key, "etcd grant committed", func(e managerEntry) bool { return e.Token == nt.Token })},
		{"controller: status written (Held, next holder)", "manager log", firstManager(mgr, t0, key, "status written", func(e managerEntry) bool { return e.Token == nt.Token })},
		{"status seen", "test watch", statusSeen},
		{"next holder: grant seen", "next holder log", firstWorker(nextLog, t0, `"grant seen"`, fmt.Sprintf(`"token"=%d`, nt.Token))},
		{"next holder: leading (consistent read confirmed)", "next holder log", firstWorker(nextLog, t0, fmt.Sprintf("leading with token %d", nt.Token))},
		{"next holder: fence raised", "next holder log", firstWorker(nextLog, t0, fmt.Sprintf("fence raised with token %d: admitted", nt.Token))},
		{fmt.Sprintf("next holder: first write accepted (token %d)", h.firstWriteToken), "ledger", h.firstWrite},
		{"kubelet: terminal update of the old pod", "test watch", h.terminal},
		{"old pod DELETED", "test watch", deleted},
	}
	sort.SliceStable(steps, func(i, j int) bool {
		return !steps[i].At.IsZero() && (steps[j].At.IsZero() || steps[i].At.Before(steps[j].At))
	})
	trace := formatTrace(steps, t0)
	t.Logf("%s trace:\n%s", name, trace)
	r.add("%s: delete of %s (token %d) at 0; term ended %s; next holder %s (token %d) granted %s; its first accepted write %s; kubelet's terminal update %s\n%s",
		name, holder, tok, h.ended.Reason, nt.Holder, nt.Token, ms(nt.GrantedAt.Sub(t0)), ms(h.firstWrite.Sub(t0)), sinceOr(h.terminal, t0), trace)
	var own []podObs
	for _, p := range pods {
		if string(p.Pod.UID) == uid {
			own = append(own, p)
		}
	}
	r.file("watch-"+name+".txt", timeline(own, locks, t0))
	r.file("trace-"+name+".txt", trace)
	return h
}

// scenarioRolloutRestart: a rollout that turns the workers' release off
// (--release-on-stop=false, for the attested scenario after it). It replaces every pod: the
// old pods still release, so every handoff is fast (HolderReleased, or attested).
func scenarioRolloutRestart(t *testing.T, c *cluster, r *e2eReport) {
	c.steady(t)
	m, t0 := c.rec.mark(), time.Now()
	patch := `[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--release-on-stop=false"}]`
	if out, err := c.n.kubectl(ctxFor(t, time.Minute), "-n", workerNS, "patch", "deployment/fenced-worker", "--type=json", "-p", patch); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := c.n.kubectl(ctxFor(t, 4*time.Minute), "-n", workerNS, "rollout", "status", "deployment/fenced-worker", "--timeout=180s"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// the rollout replaced every pod: the lock must end up with one of the new ones
	current := map[string]bool{}
	for _, p := range c.pods(t, workerNS, "app=fenced-worker") {
		current[string(p.UID)] = true
	}
	c.rec.waitLock(t, lockName, time.Minute, "holder among the new pods", func(l *lockv1.DistributedLock) bool {
		return isHeld(l) && current[string(l.Status.HolderUID)]
	})
	_, locks := c.rec.since(m)
	ts := terms(locks)
	handoffs, slowest := 0, time.Duration(0)
	for i, tm := range ts {
		if tm.EndedAt.IsZero() {
			continue
		}
		handoffs++
		if tm.Reason != lockv1.ReasonHolderReleased && tm.Reason != lockv1.ReasonHolderTerminated {
			t.Errorf("handoff from term %v: want it released by the holder (%s) or attested (%s)", tm, lockv1.ReasonHolderReleased, lockv1.ReasonHolderTerminated)
		}
		if i+1 < len(ts) && !tm.ReleasingAt.IsZero() {
			slowest = max(slowest, ts[i+1].GrantedAt.Sub(tm.ReleasingAt))
		}
	}
	if handoffs == 0 {
		t.Errorf("the rollout replaced every pod but the recording shows no handoff:\n%s", summary(ts))
	}
	r.add("rollout-restart (to --release-on-stop=false): %d handoffs in %s, every one released or attested: %v; longest from Releasing (deletion seen) to the next grant %s",
		handoffs, ms(time.Since(t0)), !t.Failed(), ms(slowest))
	t.Logf("terms:\n%s", summary(ts))
}

// scenarioManagerFailover: the active manager pod deleted: the standby takes over and no
// held lock gets a new term.
func scenarioManagerFailover(t *testing.T, c *cluster, r *e2eReport) {
	l := c.steady(t)
	tok, uid := l.Status.FencingToken, string(l.Status.HolderUID)
	active := c.activeManager(t)
	pod := c.managerPodOf(t, active)
	if pod == "" {
		t.Fatalf("the election holder %q is not a manager pod", active)
	}
	m, t0 := c.rec.mark(), time.Now()
	if out, err := c.n.kubectl(ctxFor(t, time.Minute), "-n", managerNS, "delete", "pod", pod); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var took time.Duration
	eventually(t, time.Minute, "standby holding the election", func() bool {
		h := c.activeManager(t)
		if h != "" && h != active && !strings.HasPrefix(h, pod+"-") {
			took = time.Since(t0)
			return true
		}
		return false
	})
	// the lock must not notice: same token, same holder, Held, for two lock delays
	window := time.Now().Add(2 * lockDelay)
	for time.Now().Before(window) {
		if cur := c.rec.lastLock(lockName); cur == nil || cur.Status.FencingToken != tok || cur.Status.Phase != lockv1.PhaseHeld {
			t.Fatalf("the lock changed during the manager failover: %s, want token %d Held", describeLock(cur), tok)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, ok := c.acceptedSince(t, uid, t0.Add(took)); !ok {
		t.Errorf("the holder wrote nothing to the ledger after the standby took over")
	}
	_, locks := c.rec.since(m)
	for _, o := range locks {
		if o.Lock.Status.FencingToken != tok || o.Lock.Status.Phase != lockv1.PhaseHeld {
			t.Errorf("lock version during the failover: %s, want token %d Held", describeLock(o.Lock), tok)
		}
	}
	if out, err := c.n.kubectl(ctxFor(t, 3*time.Minute), "-n", managerNS, "rollout", "status", "deployment/lockwarden-manager", "--timeout=150s"); err != nil {
		t.Fatalf("the manager Deployment did not recover: %v\n%s", err, out)
	}
	r.add("manager-failover: deleted the active replica %s; the standby held the election after %s; the lock kept token %d, Held, and the holder kept writing",
		pod, ms(took), tok)
}

// scenarioKillHolderProcess: the holder's process killed inside its container
// (restartPolicy Always). A restart never keeps a token: the term ends HolderRestarted, and
// since the pod has one container in its own PID namespace (proof that the old process is
// gone once the kubelet reports the new container), the same pod gets a new term with a new
// token at once, not after the lock delay; no other pod is granted before the lock delay.
// The restarted process writes with the new token.
func scenarioKillHolderProcess(t *testing.T, c *cluster, r *e2eReport) {
	l := c.steady(t)
	holder, uid, tok := l.Status.Holder, string(l.Status.HolderUID), l.Status.FencingToken
	pod := c.getPod(t, workerNS, holder)
	restarts := pod.Status.ContainerStatuses[0].RestartCount
	pid := c.containerPID(t, pod)
	m, t0 := c.rec.mark(), time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill the holder's process %d: %v", pid, err)
	}
	next := c.rec.waitLock(t, lockName, 90*time.Second, "a new term after the crash", func(l *lockv1.DistributedLock) bool {
		return isHeld(l) && l.Status.FencingToken > tok
	})
	var wrote int64
	var wroteAt time.Time
	eventually(t, 30*time.Second, "ledger write by the restarted process with the new token", func() bool {
		var ok bool
		wrote, wroteAt, ok = c.firstAccepted(t, uid, next.Status.FencingToken, t0)
		return ok
	})
	firstWrite := wroteAt.Sub(t0)
	pods, locks := c.rec.since(m)
	r.file("watch-kill-holder.txt", timeline(podEvents(pods, uid), locks, t0))
	tm, nt := termOf(t, terms(locks), tok)
	if tm.Reason != lockv1.ReasonHolderRestarted {
		t.Errorf("term %v after the crash: want it ended %s (a restart never keeps a token)", tm, lockv1.ReasonHolderRestarted)
	}
	if nt == nil || nt.UID != uid {
		t.Fatalf("term after %v: %v, want the restarted pod %s again (one container: proof the old process is gone)", tm, nt, holder)
	}
	if nt.GrantedAt.Sub(t0) >= lockDelay {
		t.Errorf("the restarted pod's new term came %v after the kill, want it sooner than the lock delay %v (the fast path)", nt.GrantedAt.Sub(t0), lockDelay)
	}
	var crashed, running, ready time.Time
	for _, o := range podEvents(pods, uid) {
		cs := o.Pod.Status.ContainerStatuses
		if len(cs) == 0 {
			continue
		}
		switch {
		case crashed.IsZero() && cs[0].State.Terminated != nil:
			crashed = o.At
		case running.IsZero() && cs[0].RestartCount > restarts && cs[0].State.Running != nil:
			running = o.At
		}
		if !running.IsZero() && ready.IsZero() && podReady(o.Pod) {
			ready = o.At
		}
	}
	after := c.getPod(t, workerNS, holder).Status.ContainerStatuses[0].RestartCount
	if after <= restarts {
		t.Errorf("restartCount of %s = %d, want above %d", holder, after, restarts)
	}
	rel := "never (the restart was seen first)"
	if !tm.ReleasingAt.IsZero() {
		rel = ms(tm.ReleasingAt.Sub(t0))
	}
	r.add("kill-holder-process: SIGKILL at 0; terminated reported %s; Releasing %s; restarted container running %s (restartCount %d), Ready %s; "+
		"term %d ended %s; new term %d for the same pod %s; its first accepted write (token %d) %s",
		sinceOr(crashed, t0), rel, sinceOr(running, t0), after, sinceOr(ready, t0), tok, tm.Reason, nt.Token, ms(nt.GrantedAt.Sub(t0)), wrote, ms(firstWrite))
}

// sinceOr is at - t0, or "not recorded" for a zero at.
func sinceOr(at, t0 time.Time) string {
	if at.IsZero() {
		return "not recorded"
	}
	return ms(at.Sub(t0))
}

// ms formats a duration in milliseconds, with a sign.
func ms(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}
