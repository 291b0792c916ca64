package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func testLock(mutate func(*lockv1.DistributedLock)) *lockv1.DistributedLock {
	l := &lockv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "shop", CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec:       lockv1.DistributedLockSpec{LeaseDurationSeconds: 15},
		Status: lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, Holder: "web-0", HolderUID: "u0", FencingToken: 42,
			TermLeaseSeconds: 15, ControllerEpoch: 3},
	}
	if mutate != nil {
		mutate(l)
	}
	return l
}

func releasing(since time.Duration, delay int32) func(*lockv1.DistributedLock) {
	return func(l *lockv1.DistributedLock) {
		l.Spec.LockDelaySeconds = &delay
		l.Status.Phase = lockv1.PhaseReleasing
		l.Status.Conditions = []metav1.Condition{{Type: lockv1.ConditionHeld, Status: metav1.ConditionFalse,
			Reason: lockv1.ReasonHolderNotReady, LastTransitionTime: metav1.NewTime(t0.Add(-since))}}
	}
}

func TestWaitLeft(t *testing.T) {
	for _, tc := range []struct {
		name string
		lock *lockv1.DistributedLock
		want string
	}{
		{"held", testLock(nil), "-"},
		{"releasing, 5 s of 30 s waited", testLock(releasing(5*time.Second, 30)), "25s"},
		{"releasing, the term's lease is longer than the delay", testLock(func(l *lockv1.DistributedLock) {
			releasing(0, 20)(l)
			l.Status.TermLeaseSeconds = 40
		}), "40s"},
		{"releasing, estimate run out", testLock(releasing(time.Minute, 30)), "due"},
		{"releasing, long delay", testLock(releasing(time.Minute, 600)), "9m"},
		{"releasing without a Held condition", testLock(func(l *lockv1.DistributedLock) { l.Status.Phase = lockv1.PhaseReleasing }), "?"},
	} {
		if got := waitLeft(tc.lock, t0); got != tc.want {
			t.Errorf("%s: waitLeft = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestLockTable(t *testing.T) {
	locks := []lockv1.DistributedLock{
		*testLock(func(l *lockv1.DistributedLock) { l.Name = "b" }),
		*testLock(func(l *lockv1.DistributedLock) {
			l.Name, l.Status = "a", lockv1.DistributedLockStatus{Phase: lockv1.PhasePending}
		}),
		*testLock(func(l *lockv1.DistributedLock) { l.Name, l.Namespace = "c", "dev" }),
	}
	got := lockTable(locks, t0, true)
	want := [][]string{
		{"NAMESPACE", "NAME", "HOLDER", "TOKEN", "PHASE", "WAIT-LEFT", "AGE"},
		{"dev", "c", "web-0", "42", "Held", "-", "60m"},
		{"shop", "a", "-", "-", "Pending", "-", "60m"},
		{"shop", "b", "web-0", "42", "Held", "-", "60m"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lockTable =\n%v\nwant\n%v", got, want)
	}
	if got := lockTable(locks[:1], t0, false); len(got[0]) != 6 || got[0][0] != "NAME" {
		t.Errorf("lockTable without namespaces has header %v", got[0])
	}
}

func TestHistoryTable(t *testing.T) {
	ended := metav1.NewTime(t0.Add(-10 * time.Minute))
	terms := []lockv1.Term{
		{Holder: "web-1", Token: 50, Acquired: metav1.NewTime(t0.Add(-5 * time.Minute)), Reason: lockv1.ReasonGranted},
		{Holder: "web-0", Token: 42, Acquired: metav1.NewTime(t0.Add(-time.Hour)), Ended: &ended, Reason: lockv1.ReasonHolderTerminated},
		{Holder: "web-2", Token: 40, Acquired: metav1.NewTime(t0.Add(-2 * time.Hour)), Ended: &ended, Reason: lockv1.ReasonOperatorRelease, Message: "drain node-3"},
		{Holder: "web-3", Token: 39, Acquired: metav1.NewTime(t0.Add(-2 * time.Hour)), Ended: &ended, Reason: lockv1.ReasonOperatorRelease},
	}
	want := [][]string{
		{"TOKEN", "HOLDER", "STARTED", "ENDED", "LASTED", "REASON"},
		{"50", "web-1", "2026-12-01T11:55:00Z", "(open)", "5m so far", "Granted"},
		{"42", "web-0", "2026-12-01T11:00:00Z", "2026-12-01T11:50:00Z", "50m", "HolderTerminated"},
		{"40", "web-2", "2026-12-01T10:00:00Z", "2026-12-01T11:50:00Z", "110m", "OperatorRelease: drain node-3"},
		{"39", "web-3", "2026-12-01T10:00:00Z", "2026-12-01T11:50:00Z", "110m", "OperatorRelease"},
	}
	if got := historyTable(terms, t0); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("historyTable =\n%v\nwant\n%v", got, want)
	}
}

func TestPlanRelease(t *testing.T) {
	for _, tc := range []struct {
		name    string
		lock    *lockv1.DistributedLock
		refused string // "" when allowed
		wait    int32
		already bool
	}{
		{"held", testLock(nil), "", 15, false},
		{"held, delay longer than the lease", testLock(func(l *lockv1.DistributedLock) { l.Spec.LockDelaySeconds = ptrTo[int32](90) }), "", 90, false},
		{"same request made before", testLock(func(l *lockv1.DistributedLock) {
			l.Annotations = map[string]string{lockv1.AnnotationReleaseRequest: "42"}
		}), "", 15, true},
		{"an older token was requested", testLock(func(l *lockv1.DistributedLock) {
			l.Annotations = map[string]string{lockv1.AnnotationReleaseRequest: "41"}
		}), "", 15, false},
		{"no holder", testLock(func(l *lockv1.DistributedLock) { l.Status = lockv1.DistributedLockStatus{Phase: lockv1.PhasePending} }), "has no holder", 0, false},
		{"suspended", testLock(func(l *lockv1.DistributedLock) { l.Status = lockv1.DistributedLockStatus{Phase: lockv1.PhaseSuspended} }), "has no holder", 0, false},
		{"already releasing", testLock(releasing(0, 15)), "already Releasing", 0, false},
	} {
		p, err := planRelease(tc.lock, "")
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: planRelease = %v, want allowed", tc.name, err)
		case tc.refused != "" && (!errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s: planRelease error = %v, want ErrRefused saying %q", tc.name, err, tc.refused)
		case tc.refused == "" && (p.token != 42 || p.holder != "web-0" || p.wait != tc.wait || p.already != tc.already):
			t.Errorf("%s: plan = %+v, want token 42, web-0, wait %d, already %v", tc.name, p, tc.wait, tc.already)
		}
	}
}

// TestPlanReleasePreferred: releasing the preferred holder says the lock returns to it, and
// --prefer moves the preference instead (refused without strategy Preferred or naming the
// holder itself).
func TestPlanReleasePreferred(t *testing.T) {
	preferred := func(l *lockv1.DistributedLock) {
		l.Spec.Strategy, l.Spec.PreferredHolder = lockv1.StrategyPreferred, "web-0"
	}
	for _, tc := range []struct {
		name    string
		lock    *lockv1.DistributedLock
		prefer  string
		usage   string // "" when allowed
		returns bool
	}{
		{"preferred holder released", testLock(preferred), "", "", true},
		{"another preferred pod", testLock(func(l *lockv1.DistributedLock) {
			preferred(l)
			l.Spec.PreferredHolder = "web-1"
		}), "", "", false},
		{"OldestReady", testLock(nil), "", "", false},
		{"--prefer another pod", testLock(preferred), "web-1", "", false},
		{"--prefer the holder", testLock(preferred), "web-0", "names the holder being released", false},
		{"--prefer without Preferred", testLock(nil), "web-1", "--prefer needs strategy Preferred", false},
	} {
		p, err := planRelease(tc.lock, tc.prefer)
		switch {
		case tc.usage == "" && err != nil:
			t.Errorf("%s: planRelease = %v, want allowed", tc.name, err)
		case tc.usage != "" && (err == nil || !strings.Contains(err.Error(), tc.usage)):
			t.Errorf("%s: planRelease error = %v, want one saying %q", tc.name, err, tc.usage)
		case tc.usage == "" && (p.returns != tc.returns || p.prefer != tc.prefer):
			t.Errorf("%s: plan = %+v, want returns %v, prefer %q", tc.name, p, tc.returns, tc.prefer)
		}
	}
}

func TestUnfinalizeOutcome(t *testing.T) {
	deleting := metav1.NewTime(t0)
	for _, tc := range []struct {
		name    string
		lock    *lockv1.DistributedLock
		dropped bool
		want    string
	}{
		{"no finalizer", testLock(nil), false, "no lockwarden.io/release finalizer: nothing to do"},
		{"deleted, held", testLock(func(l *lockv1.DistributedLock) { l.DeletionTimestamp = &deleting }), true,
			"finalizer removed; the lock was being deleted and is gone now; its term was not ended: web-0 (token 42) stops leading at its next read of the lock"},
		{"kept, held", testLock(nil), true,
			"finalizer removed; deleting the lock now takes effect at once; its term was not ended: web-0 (token 42) leads while the lock names it (delete the lock to end that)"},
		{"kept, no holder", testLock(func(l *lockv1.DistributedLock) { l.Status = lockv1.DistributedLockStatus{} }), true,
			"finalizer removed; deleting the lock now takes effect at once"},
	} {
		if got := unfinalizeOutcome(tc.lock, tc.dropped); got != tc.want {
			t.Errorf("%s: unfinalizeOutcome = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, exitOK},
		{usagef("bad"), exitUsage},
		{fmt.Errorf("release x: %w: no holder", ErrRefused), exitRefused},
		{fmt.Errorf("get lock: %w", ErrNoCRD), exitError},
		{errors.New("connection refused"), exitError},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

// TestHelp: --help of the plugin and of every verb exits 0 and documents the exit codes; an
// unknown verb or flag is a usage error. Nothing here reaches a cluster.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{}, {"--help"}, {"get", "--help"}, {"history", "--help"}, {"why", "--help"},
		{"release", "--help"}, {"unfinalize", "--help"}, {"help", "why"}} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != exitOK || !strings.Contains(out.String(), "Exit codes:") {
			t.Errorf("kubectl dlock %s = %d, stdout %q; want 0 and the exit codes", strings.Join(args, " "), code, out.String())
		}
	}
	for _, args := range [][]string{{"frobnicate"}, {"get", "--bogus"}, {"why"}, {"history", "a", "b"}, {"unfinalize", "x", "--all"},
		{"get", "x", "-A"}, {"release", "x"}} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != exitUsage {
			t.Errorf("kubectl dlock %s = %d (%s), want %d", strings.Join(args, " "), code, errOut.String(), exitUsage)
		}
	}
}
