package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// row finds the table row that starts with the given cells (split on runs of spaces).
func row(t *testing.T, out string, first ...string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		cells := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(line), -1)
		if len(cells) >= len(first) && strings.Join(cells[:len(first)], "|") == strings.Join(first, "|") {
			return cells
		}
	}
	t.Fatalf("no row starting %q in:\n%s", first, out)
	return nil
}

// TestGetAndHistory: get shows holder, token and phase as the controller published them;
// -A adds the namespace; history lists the term.
func TestGetAndHistory(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a", runningReady)
	f.lock("lock", "a", nil)
	l := f.waitFor("lock", "held by a-0", heldBy("a-0"))
	tok := strconv.FormatInt(l.Status.FencingToken, 10)

	code, out, _ := dlock(t, "get", "-n", f.ns)
	if code != exitOK {
		t.Fatalf("get exited %d", code)
	}
	if r := row(t, out, "lock", "a-0", tok, "Held", "-"); len(r) != 6 {
		t.Errorf("get row = %q, want NAME HOLDER TOKEN PHASE WAIT-LEFT AGE", r)
	}
	if _, out, _ := dlock(t, "get", "-A"); !strings.Contains(out, "NAMESPACE") {
		t.Errorf("get -A has no NAMESPACE column:\n%s", out)
	} else {
		row(t, out, f.ns, "lock", "a-0", tok, "Held")
	}
	code, out, _ = dlock(t, "history", "lock", "-n", f.ns)
	if code != exitOK {
		t.Fatalf("history exited %d", code)
	}
	if r := row(t, out, tok, "a-0"); r[3] != "(open)" || r[len(r)-1] != lockv1.ReasonGranted {
		t.Errorf("history row = %q, want the open term with reason Granted", r)
	}
}

// TestWhyEligibilityCases (issue 13 "must show"): why names the reason for each candidate in
// each eligibility case, and who is next, against the controller's own grant.
func TestWhyEligibilityCases(t *testing.T) {
	f := newFixture(t)
	f.pod("a-holder", "a", runningReady)
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](600) })
	f.waitFor("lock", "held by a-holder", heldBy("a-holder"))
	secondApart()
	f.pod("a-ready", "a", runningReady)
	f.pod("a-pending", "a", unschedulable)
	f.pod("a-notready", "a", notReady)
	f.pod("a-crashed", "a", crashed)
	f.pod("a-done", "a", succeeded)
	term := f.pod("a-terminating", "a", runningReady, f.onNode)
	if err := k8s.Delete(context.Background(), term); err != nil {
		t.Fatalf("delete pod: %v", err)
	}
	f.pod("b-other", "b", runningReady) // not selected: never listed

	code, out, _ := dlock(t, "why", "lock", "-n", f.ns)
	if code != exitOK {
		t.Fatalf("why exited %d", code)
	}
	for _, tc := range []struct{ pod, eligible, role, reason string }{
		{"a-holder", "yes", "holder", "is Running and Ready"},
		{"a-ready", "yes", "next", "is Running and Ready"},
		{"a-pending", "no", "-", "is Pending (Unschedulable): 0/1 nodes are available: 1 Insufficient cpu."},
		{"a-notready", "no", "-", "is not Ready (ContainersNotReady): containers with unready status: [app]"},
		{"a-crashed", "no", "-", "is not Ready (container app is restarting): restarts: 2; last exit code 1 (Error)"},
		{"a-done", "no", "-", "has Succeeded"},
		{"a-terminating", "no", "-", "is terminating: deletion requested with a grace period of 30 s"},
	} {
		if r := row(t, out, tc.pod); strings.Join(r[1:], "|") != strings.Join([]string{tc.eligible, tc.role, tc.reason}, "|") {
			t.Errorf("why row for %s = %q, want %s %s %q", tc.pod, r, tc.eligible, tc.role, tc.reason)
		}
	}
	if strings.Contains(out, "b-other") {
		t.Errorf("why lists b-other, which the selector does not match:\n%s", out)
	}
	if want := "next: a-holder holds the lock"; !strings.Contains(out, want) || !strings.Contains(out, "when its term ends a-ready is granted") {
		t.Errorf("why does not say a-ready follows a-holder:\n%s", out)
	}

	// The holder no longer matches the selector: still listed, as not selected, while its
	// term is Releasing (lock delay 600 s).
	holder := &corev1.Pod{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "a-holder"}, holder); err != nil {
		t.Fatal(err)
	}
	f.editPod(holder, func(p *corev1.Pod) { p.Labels = map[string]string{"app": "moved"} })
	f.waitFor("lock", "Releasing", func(l *lockv1.DistributedLock) bool { return l.Status.Phase == lockv1.PhaseReleasing })
	_, out, _ = dlock(t, "why", "lock", "-n", f.ns)
	if r := row(t, out, "a-holder"); strings.Join(r[1:], "|") != "no|holder|does not match spec.candidates.selector" {
		t.Errorf("why row for the relabelled holder = %q", r)
	}
	if !strings.Contains(out, "is ending: after the lock delay a-ready is granted") {
		t.Errorf("why does not say a-ready follows the ending term:\n%s", out)
	}
}

// TestWhyNoEligibleCandidate: with no eligible pod why says so for the best candidate, and
// the NoHolder condition says the same.
func TestWhyNoEligibleCandidate(t *testing.T) {
	f := newFixture(t)
	f.lock("lock", "a", nil)
	f.waitFor("lock", "Pending", func(l *lockv1.DistributedLock) bool { return l.Status.Phase == lockv1.PhasePending })
	_, out, _ := dlock(t, "why", "lock", "-n", f.ns)
	if !strings.Contains(out, "next: no eligible candidate: 0 pods match spec.candidates.selector") {
		t.Errorf("why with no pods:\n%s", out)
	}
	f.pod("a-0", "a", unschedulable)
	_, out, _ = dlock(t, "why", "lock", "-n", f.ns)
	if !strings.Contains(out, "next: no eligible candidate: pod a-0 is Pending (Unschedulable)") {
		t.Errorf("why with an unschedulable pod:\n%s", out)
	}
}

// TestRelease: release annotates the current token and reason on the object, says what
// follows, and refuses (exit 3, nothing written) without a holder or while Releasing.
func TestRelease(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a", runningReady)
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](20) })
	l := f.waitFor("lock", "held by a-0", heldBy("a-0"))

	if code, _, errOut := dlock(t, "release", "lock", "-n", f.ns); code != exitUsage || !strings.Contains(errOut, "--reason is required") {
		t.Errorf("release without --reason = %d %q, want %d naming --reason", code, errOut, exitUsage)
	}
	code, out, _ := dlock(t, "release", "lock", "-n", f.ns, "--reason", "move off node-3")
	if code != exitOK {
		t.Fatalf("release exited %d", code)
	}
	got := f.get("lock").Annotations
	if want := strconv.FormatInt(l.Status.FencingToken, 10); got[lockv1.AnnotationReleaseRequest] != want || got[lockv1.AnnotationReleaseReason] != "move off node-3" {
		t.Errorf("annotations = %v, want %s=%s and %s=%q", got, lockv1.AnnotationReleaseRequest, want, lockv1.AnnotationReleaseReason, "move off node-3")
	}
	if want := "full lock delay of 20 s"; !strings.Contains(out, want) {
		t.Errorf("release output does not say %q:\n%s", want, out)
	}
	f.waitFor("lock", "Releasing", func(l *lockv1.DistributedLock) bool { return l.Status.Phase == lockv1.PhaseReleasing })
	if _, out, _ := dlock(t, "history", "lock", "-n", f.ns); !regexp.MustCompile(`\(open\).*OperatorRelease: move off node-3\n`).MatchString(out) {
		t.Errorf("history of a term an operator is ending does not show the operator's reason:\n%s", out)
	}

	f.lock("empty", "nobody", nil)
	f.waitFor("empty", "Pending", func(l *lockv1.DistributedLock) bool { return l.Status.Phase == lockv1.PhasePending })
	code, _, errOut := dlock(t, "release", "empty", "-n", f.ns, "--reason", "x")
	if code != exitRefused || !strings.Contains(errOut, "has no holder") {
		t.Errorf("release without holder = %d %q, want %d saying it has no holder", code, errOut, exitRefused)
	}
	if a := f.get("empty").Annotations; a[lockv1.AnnotationReleaseRequest] != "" {
		t.Errorf("a refused release wrote %v", a)
	}

	f.pod("c-0", "c", runningReady)
	f.lock("ending", "c", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](600) })
	f.waitFor("ending", "held by c-0", heldBy("c-0"))
	c0 := &corev1.Pod{}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "c-0"}, c0); err != nil {
		t.Fatal(err)
	}
	f.setStatus(c0, notReady)
	f.waitFor("ending", "Releasing", func(l *lockv1.DistributedLock) bool { return l.Status.Phase == lockv1.PhaseReleasing })
	code, _, errOut = dlock(t, "release", "ending", "-n", f.ns, "--reason", "x")
	if code != exitRefused || !strings.Contains(errOut, "already Releasing") {
		t.Errorf("release while Releasing = %d %q, want %d", code, errOut, exitRefused)
	}
	if _, out, _ := dlock(t, "get", "ending", "-n", f.ns); !regexp.MustCompile(`Releasing\s+(9m[0-9]+s|10m)\s`).MatchString(out) {
		t.Errorf("get of a Releasing lock with a 600 s delay shows no WAIT-LEFT near 10m:\n%s", out)
	}
}

// TestReleasePreferred (issue 25): releasing the preferred holder says the lock will return
// to it; --prefer moves spec.preferredHolder in the same request, so the next holder keeps it.
func TestReleasePreferred(t *testing.T) {
	f := newFixture(t)
	f.pod("p-0", "p", runningReady)
	f.pod("p-1", "p", runningReady)
	f.lock("lock", "p", func(s *lockv1.DistributedLockSpec) {
		s.Strategy, s.PreferredHolder = lockv1.StrategyPreferred, "p-0"
		s.LeaseDurationSeconds = 2
	})
	f.waitFor("lock", "held by p-0", heldBy("p-0"))
	code, out, _ := dlock(t, "release", "lock", "-n", f.ns, "--reason", "drain node-3")
	if code != exitOK || !strings.Contains(out, "the lock returns to p-0") || !strings.Contains(out, "--prefer POD") {
		t.Errorf("release of the preferred holder = %d:\n%s\nwant it to say the lock returns to p-0 and offer --prefer", code, out)
	}

	f.lock("moved", "p", func(s *lockv1.DistributedLockSpec) {
		s.Strategy, s.PreferredHolder = lockv1.StrategyPreferred, "p-0"
		s.LeaseDurationSeconds = 2
	})
	f.waitFor("moved", "held by p-0", heldBy("p-0"))
	if code, _, errOut := dlock(t, "release", "moved", "-n", f.ns, "--reason", "x", "--prefer", "p-0"); code != exitUsage || !strings.Contains(errOut, "names the holder") {
		t.Errorf("release --prefer of the holder itself = %d %q, want %d", code, errOut, exitUsage)
	}
	code, out, _ = dlock(t, "release", "moved", "-n", f.ns, "--reason", "drain node-3", "--prefer", "p-1")
	if code != exitOK || !strings.Contains(out, "spec.preferredHolder is now p-1") {
		t.Errorf("release --prefer p-1 = %d:\n%s", code, out)
	}
	if l := f.get("moved"); l.Spec.PreferredHolder != "p-1" || l.Annotations[lockv1.AnnotationReleaseReason] != "drain node-3" {
		t.Errorf("after release --prefer p-1: preferredHolder %q, annotations %v; want p-1 and the release", l.Spec.PreferredHolder, l.Annotations)
	}
	f.waitFor("moved", "held by p-1", heldBy("p-1"))
}

// TestUnfinalize (issue 15 item 1): with the manager gone a deleted lock stays; unfinalize
// refuses without --manager-gone and changes nothing, and with it the lock is gone.
func TestUnfinalize(t *testing.T) {
	f := newFixture(t)
	f.pod("a-0", "a", runningReady)
	f.lock("deleted", "a", nil)
	f.lock("kept", "a", nil)
	f.waitFor("deleted", "held by a-0", heldBy("a-0"))
	f.waitFor("kept", "finalized", func(l *lockv1.DistributedLock) bool { return len(l.Finalizers) > 0 })
	f.stop() // the manager is gone
	if err := k8s.Delete(context.Background(), f.get("deleted")); err != nil {
		t.Fatalf("delete lock: %v", err)
	}
	if l := f.get("deleted"); l.DeletionTimestamp == nil {
		t.Fatalf("lock has no deletion timestamp after delete")
	}

	code, _, errOut := dlock(t, "unfinalize", "--all", "-n", f.ns)
	if code != exitRefused || !strings.Contains(errOut, "--manager-gone") {
		t.Errorf("unfinalize without --manager-gone = %d %q, want %d naming --manager-gone", code, errOut, exitRefused)
	}
	if l := f.get("deleted"); len(l.Finalizers) == 0 {
		t.Fatalf("a refused unfinalize dropped the finalizer")
	}
	code, out, _ := dlock(t, "unfinalize", "--all", "-n", f.ns, "--manager-gone")
	if code != exitOK {
		t.Fatalf("unfinalize exited %d", code)
	}
	var gone lockv1.DistributedLock
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "deleted"}, &gone); !apierrors.IsNotFound(err) {
		t.Errorf("deleted lock after unfinalize: %v, want NotFound", err)
	}
	if l := f.get("kept"); len(l.Finalizers) != 0 {
		t.Errorf("kept lock still has finalizers %v", l.Finalizers)
	}
	for _, want := range []string{f.ns + "/deleted: finalizer removed; the lock was being deleted and is gone now; its term was not ended: a-0",
		f.ns + "/kept: finalizer removed; deleting the lock now takes effect at once", "expire with the manager's\ngrant lease", "Nothing fences a holder"} {
		if !strings.Contains(out, want) {
			t.Errorf("unfinalize output lacks %q:\n%s", want, out)
		}
	}
	if err := k8s.Delete(context.Background(), f.get("kept")); err != nil {
		t.Fatalf("delete kept lock: %v", err)
	}
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "kept"}, &gone); !apierrors.IsNotFound(err) {
		t.Errorf("kept lock after delete without a manager: %v, want NotFound at once", err)
	}
}

// TestClusterErrors: an unknown lock and a user without permission get clear errors (exit 1).
func TestClusterErrors(t *testing.T) {
	f := newFixture(t)
	code, _, errOut := dlock(t, "why", "missing", "-n", f.ns)
	if code != exitError || !strings.Contains(errOut, `"missing" not found`) || !strings.Contains(errOut, "kubectl dlock get -n "+f.ns) {
		t.Errorf("why of an unknown lock = %d %q", code, errOut)
	}
	f.pod("a-0", "a", runningReady)
	f.lock("lock", "a", nil)
	f.waitFor("lock", "held by a-0", heldBy("a-0"))
	code, _, errOut = dlock(t, "release", "lock", "-n", f.ns, "--reason", "x", "--as", "nobody")
	if code != exitError || !strings.Contains(errOut, "forbidden") || !strings.Contains(errOut, "no permission") {
		t.Errorf("release as a user without RBAC = %d %q, want %d forbidden", code, errOut, exitError)
	}
	if a := f.get("lock").Annotations; a[lockv1.AnnotationReleaseRequest] != "" {
		t.Errorf("a forbidden release wrote %v", a)
	}
}

func ptrTo[T any](v T) *T { return &v }

// secondApart lets the API server's one-second creation times differ (OldestReady order).
func secondApart() { time.Sleep(1100 * time.Millisecond) }
