package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/internal/testenv"
)

// execArgs is exec mode with grace 1s, no probe server, and this test binary as the child.
func execArgs(t *testing.T) []string {
	t.Helper()
	self, err := osExecutable()
	if err != nil {
		t.Fatal(err)
	}
	return []string{"exec", "--grace", "1s", "--probe-address", "0", "--", self}
}

// TestExecStopsWhenAPIServerUnreachable cuts the holder's agent off from the API server
// (its proxy holds every request) while its child, which ignores SIGTERM and has a
// grandchild in its process group that ignores it too, runs. The agent must signal the group
// with SIGTERM at ValidUntil - grace and kill it by ValidUntil: every process is seen dead
// before the validity its last read could have given. The agent abandons the token as it
// stops the child (a second child under it would be another writer, refused wherever the
// first one fenced), so its readiness fails and, with the kubelet's readiness probe
// (followReadiness), the controller ends the term. When the API server is reachable again the
// child does not start again under that token, only under the new token the pod is granted.
func TestExecStopsWhenAPIServerUnreachable(t *testing.T) {
	f := newFixture(t)
	p := f.pod("worker-0")
	probe := probeAddress(t)
	args := execArgs(t)
	for i, a := range args {
		if a == "--probe-address" {
			args[i+1] = probe
		}
	}
	a := f.startAgent(p, args, childIgnoreTermEnv+"=1", childGrandchildEnv+"=1")
	f.followReadiness(p, probe)
	w := watch(t, a)
	eventually(t, 30*time.Second, func() bool { return len(a.started("start")) == 1 && len(a.started("grandchild")) == 1 },
		func() string { return fmt.Sprintf("no child and grandchild started; agent log:\n%s", a.out) })
	first := a.started("start")[0]
	time.Sleep(2 * validFor()) // several confirmations: the child keeps running through them
	if len(a.started("start")) != 1 || w.allDead(1) {
		t.Fatalf("child restarted or died while the term was confirmed; records %+v; agent log:\n%s", a.records(), a.out)
	}

	a.proxy.SetMode(apiproxy.Hold)
	eventually(t, 3*validFor(), func() bool { return w.allDead(2) },
		func() string { return fmt.Sprintf("child and grandchild not dead; agent log:\n%s", a.out) })
	for _, lt := range w.lifetimes() {
		term := a.termAt(lt.rec.pid)
		switch {
		case term == 0:
			t.Errorf("process %d (%s) died without receiving SIGTERM first", lt.rec.pid, lt.rec.kind)
		case lt.dead-term < int64(time.Second/2):
			t.Errorf("process %d (%s) died %v after SIGTERM, want the grace (1s, minus %v before ValidUntil) first", lt.rec.pid, lt.rec.kind, time.Duration(lt.dead-term), killLead)
		}
	}
	checkWithinValidity(t, f, a, w)

	a.proxy.SetMode(apiproxy.Pass)
	// Not ready while the lock names the pod with the abandoned token (Held, then Releasing
	// through the lock delay); a new token after it.
	eventually(t, 3*validFor()+leaseSeconds*time.Second, func() bool { return len(a.started("start")) == 2 && len(a.started("grandchild")) == 2 },
		func() string {
			return fmt.Sprintf("child not started again after the API server came back; agent log:\n%s", a.out)
		})
	if again := a.started("start")[1]; again.token <= first.token {
		t.Errorf("child started again with token %d, want a new token above %d: a child runs once under a token", again.token, first.token)
	}
	for _, h := range f.get().Status.History {
		if h.Token == first.token && h.Reason != lockv1.ReasonHolderNotReady {
			t.Errorf("term of token %d ended %q, want %s (the agent's readiness failed once it abandoned the token)", first.token, h.Reason, lockv1.ReasonHolderNotReady)
		}
	}
	a.cancel()
	if code := a.wait(t, 10*time.Second); code != exitOK {
		t.Errorf("agent exit code after its context ended = %d, want %d", code, exitOK)
	}
	eventually(t, 5*time.Second, func() bool { return w.allDead(4) },
		func() string { return fmt.Sprintf("processes left after the agent returned: %+v", w.lifetimes()) })
	checkWithinValidity(t, f, a, w)
}

// TestExecStopsWhenDeposed runs two pods' agents. The holder's pod is made not Ready: the
// controller moves the lock to Releasing, the holder's agent sees it and stops its child, and
// the other pod is granted after the lock delay; its child starts only after the first one is
// dead. Then the new holder is cut off from the API server and deposed the same way (it
// cannot see Releasing, and its child ignores SIGTERM): its child is killed by its validity's
// end, before the first pod's child starts again.
func TestExecStopsWhenDeposed(t *testing.T) {
	f := newFixture(t)
	p0 := f.pod("worker-0")
	p1 := f.pod("worker-1")
	a0 := f.startAgent(p0, execArgs(t))
	a1 := f.startAgent(p1, execArgs(t), childIgnoreTermEnv+"=1")
	w0, w1 := watch(t, a0), watch(t, a1)
	eventually(t, 30*time.Second, func() bool { return len(a0.started("start")) == 1 },
		func() string {
			return fmt.Sprintf("worker-0's child not started (the oldest pod is granted first); log:\n%s", a0.out)
		})

	ctx := context.Background()
	if _, err := f.kubelet.NotReady(ctx, p0); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() bool { return len(a1.started("start")) == 1 },
		func() string { return fmt.Sprintf("worker-1's child not started; log:\n%s", a1.out) })
	l0, l1 := w0.lifetimes(), a1.started("start")[0]
	if len(l0) != 1 || l0[0].dead == 0 || l0[0].dead >= l1.at {
		t.Fatalf("worker-0's child %+v not seen dead before worker-1's child started at %d", l0, l1.at)
	}
	t.Logf("worker-0's child seen dead %v before worker-1's child started", time.Duration(l1.at-l0[0].dead).Round(time.Millisecond))
	if a0.termAt(l0[0].rec.pid) == 0 {
		t.Errorf("worker-0's child got no SIGTERM")
	}
	if l1.token <= l0[0].rec.token {
		t.Errorf("worker-1's token %d is not above worker-0's %d", l1.token, l0[0].rec.token)
	}

	// worker-1 leads; cut it off, make worker-0 eligible again and depose worker-1.
	if _, err := f.kubelet.SetStatus(ctx, p0, readyAgain); err != nil {
		t.Fatal(err)
	}
	a1.proxy.SetMode(apiproxy.Hold)
	if _, err := f.kubelet.NotReady(ctx, p1); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() bool { return len(a0.started("start")) == 2 },
		func() string { return fmt.Sprintf("worker-0's child not started again; log:\n%s", a0.out) })
	again := a0.started("start")[1]
	ls1 := w1.lifetimes()
	if len(ls1) != 1 || ls1[0].dead == 0 || ls1[0].dead >= again.at {
		t.Fatalf("worker-1's child %+v not seen dead before worker-0's child started again at %d", ls1, again.at)
	}
	t.Logf("worker-1's child (cut off, ignoring SIGTERM) seen dead %v before worker-0's child started again", time.Duration(again.at-ls1[0].dead).Round(time.Millisecond))
	if a1.termAt(ls1[0].rec.pid) == 0 {
		t.Errorf("worker-1's child got no SIGTERM before SIGKILL")
	}
	a0.cancel()
	a1.cancel()
	a0.wait(t, 10*time.Second)
	a1.wait(t, 10*time.Second)
	eventually(t, 5*time.Second, func() bool { return w0.allDead(2) && w1.allDead(1) },
		func() string { return "processes left after the agents returned" })
	checkWithinValidity(t, f, a0, w0)
	checkWithinValidity(t, f, a1, w1)
}

// TestExecChildExitEndsAgent: a child that exits by itself during a term ends the agent with
// the child's exit code, after its grandchild (left in the group) is stopped too.
func TestExecChildExitEndsAgent(t *testing.T) {
	f := newFixture(t)
	p := f.pod("worker-0")
	a := f.startAgent(p, execArgs(t), childExitEnv+"=3", childGrandchildEnv+"=1")
	w := watch(t, a)
	if code := a.wait(t, 30*time.Second); code != 3 {
		t.Errorf("agent exit code = %d, want the child's 3; log:\n%s", code, a.out)
	}
	eventually(t, 5*time.Second, func() bool { return w.allDead(2) },
		func() string { return fmt.Sprintf("child or grandchild left: %+v", w.lifetimes()) })
	checkWithinValidity(t, f, a, w)
}

// TestExecRefusesTermShorterThanTwiceGrace: with --grace 3s a term of L = 6 s (4.5 s of
// validity) is refused: the child never starts and /readyz fails, naming --grace, while the
// pod holds the lock.
func TestExecRefusesTermShorterThanTwiceGrace(t *testing.T) {
	f := newFixture(t)
	p := f.pod("worker-0")
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	probe := fmt.Sprintf("127.0.0.1:%d", ports[0])
	self, err := osExecutable()
	if err != nil {
		t.Fatal(err)
	}
	a := f.startAgent(p, []string{"exec", "--grace", "3s", "--probe-address", probe, "--", self})
	var body string
	eventually(t, 30*time.Second, func() bool {
		var status int
		status, body = httpGet("http://" + probe + "/readyz")
		return status == http.StatusServiceUnavailable && strings.Contains(body, "--grace 3s")
	}, func() string { return fmt.Sprintf("/readyz = %q, want 503 naming --grace; log:\n%s", body, a.out) })
	t.Logf("/readyz: %s", strings.TrimSpace(body))
	if l := f.get(); string(l.Status.HolderUID) != a.uid {
		t.Errorf("holder %s, want worker-0 (the refusal is of a term this pod was granted)", l.Status.Holder)
	}
	if rs := a.records(); len(rs) != 0 {
		t.Errorf("child records %+v, want none: the term is refused", rs)
	}
}

// httpGet returns the status and body of a GET of url (0 on error).
func httpGet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestExecReleaseOnStop: by default (--release-on-stop), an agent told to stop (a pod
// deletion's SIGTERM) stops its child, then releases the lock: the controller ends the term
// as HolderReleased and grants the other pod without the lock delay; its child starts only
// after the first one is dead.
func TestExecReleaseOnStop(t *testing.T) {
	f := newFixture(t)
	p0 := f.pod("worker-0")
	p1 := f.pod("worker-1")
	self, err := osExecutable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"exec", "--grace", "1s", "--probe-address", "0", "--", self}
	a0 := f.startAgent(p0, args)
	w0 := watch(t, a0)
	eventually(t, 30*time.Second, func() bool { return len(a0.started("start")) == 1 },
		func() string { return fmt.Sprintf("worker-0's child not started; log:\n%s", a0.out) })
	a1 := f.startAgent(p1, args)
	w1 := watch(t, a1)
	a0.cancel()
	if code := a0.wait(t, 10*time.Second); code != exitOK {
		t.Errorf("worker-0's agent exited %d, want %d", code, exitOK)
	}
	eventually(t, 30*time.Second, func() bool { return len(a1.started("start")) == 1 },
		func() string { return fmt.Sprintf("worker-1's child not started; log:\n%s", a1.out) })
	first, next := w0.lifetimes(), a1.started("start")[0]
	if len(first) != 1 || first[0].dead == 0 || first[0].dead >= next.at {
		t.Fatalf("worker-0's child %+v not seen dead before worker-1's child started at %d", first, next.at)
	}
	for _, r := range []record{a0.started("start")[0], next} {
		if r.slot != 0 {
			t.Errorf("child %d of a one-slot lock: LOCKWARDEN_SLOT %d, want 0", r.pid, r.slot)
		}
	}
	l := f.get()
	released := false
	for _, h := range l.Status.History {
		if string(h.HolderUID) == a0.uid && h.Token == first[0].rec.token && h.Reason == lockv1.ReasonHolderReleased {
			released = true
		}
	}
	if !released {
		t.Errorf("history %+v: want worker-0's term of token %d ended %s; worker-0's log:\n%s", l.Status.History, first[0].rec.token, lockv1.ReasonHolderReleased, a0.out)
	}
	t.Logf("worker-0's child seen dead %v before worker-1's child started (lock delay %ds)",
		time.Duration(next.at-first[0].dead).Round(time.Millisecond), leaseSeconds)
	a1.cancel()
	a1.wait(t, 10*time.Second)
	eventually(t, 5*time.Second, func() bool { return w1.allDead(1) }, func() string { return "worker-1's child left" })
	checkWithinValidity(t, f, a0, w0)
	checkWithinValidity(t, f, a1, w1)
}

// TestExecReleaseOnStopOff: with --release-on-stop=false, an agent told to stop sends no
// release: the term ends the slow way (the pod's deletion is not attested here, so Releasing
// and the lock delay), never as HolderReleased.
func TestExecReleaseOnStopOff(t *testing.T) {
	f := newFixture(t)
	p0 := f.pod("worker-0")
	self, err := osExecutable()
	if err != nil {
		t.Fatal(err)
	}
	a0 := f.startAgent(p0, []string{"exec", "--grace", "1s", "--probe-address", "0", "--release-on-stop=false", "--", self})
	eventually(t, 30*time.Second, func() bool { return len(a0.started("start")) == 1 },
		func() string { return fmt.Sprintf("worker-0's child not started; log:\n%s", a0.out) })
	token := a0.started("start")[0].token
	a0.cancel()
	if code := a0.wait(t, 10*time.Second); code != exitOK {
		t.Errorf("worker-0's agent exited %d, want %d", code, exitOK)
	}
	if strings.Contains(a0.out.String(), `"msg"="release sent"`) {
		t.Errorf("agent with --release-on-stop=false sent a release; log:\n%s", a0.out)
	}
	if l := f.get(); l.Annotations[lockv1.AnnotationHolderRelease] != "" {
		t.Errorf("lock annotated %q after a stop with --release-on-stop=false, want no release of token %d", l.Annotations[lockv1.AnnotationHolderRelease], token)
	}
}
