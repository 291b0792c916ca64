//go:build e2e

package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

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

// scenarioDeleteHolder: `kubectl delete pod` of the holder. The kubelet's terminal-phase
// update attests that the holder stopped, so the next holder is granted at once.
func scenarioDeleteHolder(t *testing.T, c *cluster, r *e2eReport) {
	l := c.steady(t)
	holder, uid, tok := l.Status.Holder, string(l.Status.HolderUID), l.Status.FencingToken
	m, t0 := c.rec.mark(), time.Now()
	if out, err := c.n.kubectl(ctxFor(t, time.Minute), "-n", workerNS, "delete", "pod", holder); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	next := c.rec.waitLock(t, lockName, time.Minute, "next holder", func(l *lockv1.DistributedLock) bool {
		return isHeld(l) && l.Status.FencingToken > tok
	})
	pods, locks := c.rec.since(m)
	var terminal, deleted time.Time
	for _, p := range podEvents(pods, uid) {
		if terminal.IsZero() && (p.Pod.Status.Phase == corev1.PodSucceeded || p.Pod.Status.Phase == corev1.PodFailed) && allTerminated(p.Pod) {
			terminal = p.At
		}
		if p.Type == "DELETED" {
			deleted = p.At
		}
	}
	tm, nt := termOf(t, terms(locks), tok)
	if tm.Reason != lockv1.ReasonHolderTerminated {
		t.Errorf("term %v: want it ended %s (attested by the kubelet's terminal update)", tm, lockv1.ReasonHolderTerminated)
	}
	if terminal.IsZero() {
		t.Errorf("no terminal-phase update of %s was recorded before the next grant", holder)
	}
	if nt == nil {
		t.Fatalf("no term after %v", tm)
	}
	rel := "never"
	if !tm.ReleasingAt.IsZero() {
		rel = ms(tm.ReleasingAt.Sub(t0))
	}
	del := "not yet recorded when the next grant was"
	if !deleted.IsZero() {
		del = ms(deleted.Sub(t0))
	}
	r.add("delete-holder: kubectl delete at 0; Releasing (HolderTerminating) published %s; kubelet's terminal update %s; next holder %s (token %d) granted %s, %s after the terminal update; the pod's DELETED %s",
		rel, ms(terminal.Sub(t0)), next.Status.Holder, next.Status.FencingToken, ms(nt.GrantedAt.Sub(t0)), ms(nt.GrantedAt.Sub(terminal)), del)
	var own []podObs
	for _, p := range pods {
		if string(p.Pod.UID) == uid {
			own = append(own, p)
		}
	}
	r.file("watch-delete-holder.txt", timeline(own, locks, t0))
}

// scenarioRolloutRestart: `kubectl rollout restart`: every handoff is attested.
func scenarioRolloutRestart(t *testing.T, c *cluster, r *e2eReport) {
	c.steady(t)
	m, t0 := c.rec.mark(), time.Now()
	if out, err := c.n.kubectl(ctxFor(t, time.Minute), "-n", workerNS, "rollout", "restart", "deployment/fenced-worker"); err != nil {
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
		if tm.Reason != lockv1.ReasonHolderTerminated {
			t.Errorf("handoff from term %v: want it attested (%s)", tm, lockv1.ReasonHolderTerminated)
		}
		if i+1 < len(ts) && !tm.ReleasingAt.IsZero() {
			slowest = max(slowest, ts[i+1].GrantedAt.Sub(tm.ReleasingAt))
		}
	}
	if handoffs == 0 {
		t.Errorf("the rollout replaced every pod but the recording shows no handoff:\n%s", summary(ts))
	}
	r.add("rollout-restart: %d handoffs in %s, every one attested: %v; longest from Releasing (deletion seen) to the next grant %s",
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
// (restartPolicy Always). The kubelet's crash-and-restart sequence is not attestation:
// Releasing, then the lock delay; the restarted pod can hold again.
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
	// The term goes on (bounce back, same token) or ends; either way wait for Held again.
	// Under load the kubelet's status updates can coalesce: it may report the restarted
	// container already Ready (restartCount up) without ever reporting the pod NotReady. Then
	// nothing asks the controller to end the term, and it need not: the kubelet starts a
	// container again only after the old one's process is gone. Both are recorded.
	coalesced := false
	c.rec.waitLock(t, lockName, 90*time.Second, "Held again after the crash", func(l *lockv1.DistributedLock) bool {
		pods, locks := c.rec.since(m)
		tm, _ := termOfNoFail(terms(locks), tok)
		if isHeld(l) && (l.Status.FencingToken > tok || !tm.ReleasingAt.IsZero()) {
			return true
		}
		coalesced = isHeld(l) && l.Status.FencingToken == tok && restartedReadyOnly(podEvents(pods, uid), restarts)
		return coalesced
	})
	pods, locks := c.rec.since(m)
	if coalesced {
		r.file("watch-kill-holder.txt", timeline(podEvents(pods, uid), locks, t0))
		r.add("kill-holder-process: SIGKILL at 0; the kubelet reported the restarted container Ready without a NotReady update (its status updates coalesced); the term with token %d went on, its old process gone", tok)
		return
	}
	tm, nt := termOf(t, terms(locks), tok)
	for _, b := range checkNotAttested(tm, nt, watchSlack) {
		t.Error(b)
	}
	r.file("watch-kill-holder.txt", timeline(podEvents(pods, uid), locks, t0))
	// the restarted pod can hold again: help OldestReady along by deleting other holders
	for i := 0; i < 3; i++ {
		cur := c.rec.lastLock(lockName)
		if string(cur.Status.HolderUID) == uid {
			break
		}
		if out, err := c.n.kubectl(ctxFor(t, time.Minute), "-n", workerNS, "delete", "pod", cur.Status.Holder); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		c.rec.waitLock(t, lockName, time.Minute, "next holder", func(l *lockv1.DistributedLock) bool {
			return isHeld(l) && l.Status.FencingToken > cur.Status.FencingToken
		})
	}
	cur := c.rec.lastLock(lockName)
	if string(cur.Status.HolderUID) != uid {
		t.Fatalf("the restarted pod %s does not hold the lock again: %s", holder, describeLock(cur))
	}
	var wrote int64
	eventually(t, 30*time.Second, "ledger write by the restarted pod", func() bool {
		tok, ok := c.acceptedSince(t, uid, t0)
		wrote = tok
		return ok
	})
	after := c.getPod(t, workerNS, holder).Status.ContainerStatuses[0].RestartCount
	if after <= restarts {
		t.Errorf("restartCount of %s = %d, want above %d", holder, after, restarts)
	}
	r.add("kill-holder-process: SIGKILL at 0; %v; the restarted pod (restartCount %d) held again and wrote with token %d",
		tm, after, wrote)
}

// termOfNoFail is termOf without failing when the term is not (yet) recorded.
func termOfNoFail(ts []term, token int64) (term, bool) {
	for _, tm := range ts {
		if tm.Token == token {
			return tm, true
		}
	}
	return term{}, false
}

// ms formats a duration in milliseconds, with a sign.
func ms(d time.Duration) string {
	return d.Round(time.Millisecond).String()
}

// restartedReadyOnly: the pod's events show a restartCount above restarts and Ready, and no
// event showing it not Ready (the kubelet's coalesced report of a fast restart).
func restartedReadyOnly(evs []podObs, restarts int32) bool {
	restarted := false
	for _, o := range evs {
		p := o.Pod
		if !podReady(p) {
			return false
		}
		if len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].RestartCount > restarts {
			restarted = true
		}
	}
	return restarted
}
