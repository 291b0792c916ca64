package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/eligibility"
)

// slotsStatus is a 3-slot lock's status as a controller would publish it, with the holders'
// UIDs given: slot 0 and slot 1 Held by a-0 and a-1, slot 2 free after a term that ended.
func slotsStatus(uid0, uid1 string, at time.Time) lockv1.DistributedLockStatus {
	ago := func(d time.Duration) metav1.Time { return metav1.NewTime(at.Add(-d).Truncate(time.Second)) }
	ended := ago(10 * time.Minute)
	held := func(since metav1.Time) []metav1.Condition {
		return []metav1.Condition{{Type: lockv1.ConditionHeld, Status: metav1.ConditionTrue, Reason: lockv1.ReasonHolderPublished,
			Message: "published", LastTransitionTime: since}}
	}
	return lockv1.DistributedLockStatus{
		Phase: lockv1.PhaseHeld, Holder: "a-0", HolderUID: types.UID(uid0), FencingToken: 5, MaxFencingToken: 5,
		TermLeaseSeconds: 15, ControllerEpoch: 2, AcquireTime: ptrTo(ago(time.Hour)), Transitions: 1, EligibleCandidates: 3,
		Conditions: held(ago(time.Hour)),
		History:    []lockv1.Term{{Holder: "a-0", HolderUID: types.UID(uid0), Token: 5, Acquired: ago(time.Hour), Reason: lockv1.ReasonGranted}},
		SlotsHeld:  "2/3",
		Slots: []lockv1.SlotStatus{
			{Index: 1, Phase: lockv1.PhaseHeld, Holder: "a-1", HolderUID: types.UID(uid1), FencingToken: 9, MaxFencingToken: 9,
				TermLeaseSeconds: 15, AcquireTime: ptrTo(ago(5 * time.Minute)), Transitions: 2, Conditions: held(ago(5 * time.Minute)),
				History: []lockv1.Term{
					{Holder: "a-1", HolderUID: types.UID(uid1), Token: 9, Acquired: ago(5 * time.Minute), Reason: lockv1.ReasonGranted},
					{Holder: "old-1", HolderUID: "u-old", Token: 7, Acquired: ago(time.Hour), Ended: &ended, Reason: lockv1.ReasonOperatorRelease, Message: "drain node-3"},
				}},
			{Index: 2, Phase: lockv1.PhasePending, MaxFencingToken: 8, Transitions: 1,
				Conditions: []metav1.Condition{{Type: lockv1.ConditionHeld, Status: metav1.ConditionFalse, Reason: lockv1.ReasonNoHolder,
					Message: "no holder", LastTransitionTime: ended}},
				History: []lockv1.Term{{Holder: "gone-2", HolderUID: "u-gone", Token: 8, Acquired: ago(2 * time.Hour), Ended: &ended, Reason: lockv1.ReasonHolderGone}}},
		},
	}
}

func TestLockTableSlots(t *testing.T) {
	pool := testLock(func(l *lockv1.DistributedLock) {
		l.Name, l.Spec.Slots, l.Status = "pool", 3, slotsStatus("u0", "u1", t0)
		// slot 1's term is ending: its own Held condition and lease give its wait
		delay := int32(30)
		l.Spec.LockDelaySeconds = &delay
		l.Status.Slots[0].Phase = lockv1.PhaseReleasing
		l.Status.Slots[0].Conditions = []metav1.Condition{{Type: lockv1.ConditionHeld, Status: metav1.ConditionFalse,
			Reason: lockv1.ReasonHolderNotReady, LastTransitionTime: metav1.NewTime(t0.Add(-10 * time.Second))}}
	})
	got := lockTable([]lockv1.DistributedLock{*pool, *testLock(nil)}, t0, false)
	want := [][]string{
		{"NAME", "HOLDER", "TOKEN", "PHASE", "WAIT-LEFT", "AGE"},
		{"pool[0]", "a-0", "5", "Held", "-", "60m"},
		{"pool[1]", "a-1", "9", "Releasing", "20s", "60m"},
		{"pool[2]", "-", "-", "Pending", "-", "60m"},
		{"web", "web-0", "42", "Held", "-", "60m"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("lockTable =\n%v\nwant\n%v", got, want)
	}
}

// TestTargetSlot: release of a lock of several slots needs the slot named, by index or by
// holder; a one-slot lock is released as before, and its flags are checked against it.
func TestTargetSlot(t *testing.T) {
	pool := testLock(func(l *lockv1.DistributedLock) { l.Spec.Slots, l.Status = 3, slotsStatus("u0", "u1", t0) })
	for _, tc := range []struct {
		name   string
		lock   *lockv1.DistributedLock
		target releaseTarget
		want   int32
		err    string // "" when allowed
		code   int
	}{
		{"one slot, no flag", testLock(nil), releaseTarget{slot: -1}, 0, "", exitOK},
		{"one slot, --slot 0", testLock(nil), releaseTarget{slot: 0}, 0, "", exitOK},
		{"one slot, --holder of it", testLock(nil), releaseTarget{slot: -1, holder: "web-0"}, 0, "", exitOK},
		{"one slot, --slot 1", testLock(nil), releaseTarget{slot: 1}, 0, "has one slot (slot 0)", exitUsage},
		{"one slot, --holder of another pod", testLock(nil), releaseTarget{slot: -1, holder: "web-1"}, 0, "is not the lock's holder", exitRefused},
		{"slots, no flag", pool, releaseTarget{slot: -1}, 0, "has 3 slots: name the term to end with --slot I or --holder POD (slot 0: a-0, token 5; slot 1: a-1, token 9)", exitUsage},
		{"slots, --slot 1", pool, releaseTarget{slot: 1}, 1, "", exitOK},
		{"slots, --slot 2 (free)", pool, releaseTarget{slot: 2}, 2, "", exitOK},
		{"slots, --slot 3", pool, releaseTarget{slot: 3}, 0, "has slots 0 to 2", exitUsage},
		{"slots, --holder a-1", pool, releaseTarget{slot: -1, holder: "a-1"}, 1, "", exitOK},
		{"slots, --holder a-1 --slot 1", pool, releaseTarget{slot: 1, holder: "a-1"}, 1, "", exitOK},
		{"slots, --holder a-1 --slot 0", pool, releaseTarget{slot: 0, holder: "a-1"}, 0, "holds slot 1, not --slot 0", exitRefused},
		{"slots, --holder of no slot", pool, releaseTarget{slot: -1, holder: "a-2"}, 0, "holds none of its slots", exitRefused},
	} {
		got, err := targetSlot(tc.lock, tc.target)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s: targetSlot = %d, %v; want %d", tc.name, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || exitCode(err) != tc.code):
			t.Errorf("%s: targetSlot error = %v (exit %d), want exit %d saying %q", tc.name, err, exitCode(err), tc.code, tc.err)
		}
	}
}

func TestPlanSlotRelease(t *testing.T) {
	pool := testLock(func(l *lockv1.DistributedLock) {
		l.Spec.Slots, l.Status = 3, slotsStatus("u0", "u1", t0)
		l.Status.Slots[0].TermLeaseSeconds = 40
		l.Annotations = map[string]string{lockv1.AnnotationReleaseRequest: "9"}
	})
	p, err := planSlotRelease(pool, 1, "")
	if err != nil || p.token != 9 || p.holder != "a-1" || p.wait != 40 || !p.already || p.slot != 1 || !p.slots {
		t.Errorf("planSlotRelease(slot 1) = %+v, %v; want a-1's token 9, its own 40 s lease as the wait, already requested", p, err)
	}
	if p, err := planSlotRelease(pool, 0, ""); err != nil || p.token != 5 || p.holder != "a-0" || p.already {
		t.Errorf("planSlotRelease(slot 0) = %+v, %v; want a-0's token 5", p, err)
	}
	if _, err := planSlotRelease(pool, 2, ""); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "release shop/web slot 2: refused: slot 2 has no holder (phase Pending)") {
		t.Errorf("planSlotRelease(free slot 2) = %v, want refused: slot 2 has no holder", err)
	}
	var out bytes.Buffer
	writeReleasePlan(&out, pool, p, "x")
	if want := "release of the term of a-1 in slot 1 (token 9) requested again"; !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "moves slot 1 to Releasing") {
		t.Errorf("writeReleasePlan =\n%s\nwant it to name slot 1 (%q)", out.String(), want)
	}
}

// newBareFixture is a test namespace with no controller: the test writes the locks' status
// by hand (a 3-slot lock, which no controller grants yet).
func newBareFixture(t *testing.T) *fixture {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "dlock-slots-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	return &fixture{t: t, ns: ns.Name, stop: func() {}}
}

// TestSlots (issue 22): for a 3-slot lock whose status has slot 0 and slots 1 and 2, get
// shows a row per slot, history a section per slot, why each slot's candidates without the
// pods holding other slots, and release ends the term named by --slot or --holder.
func TestSlots(t *testing.T) {
	f := newBareFixture(t)
	a0 := f.pod("a-0", "a", runningReady)
	a1 := f.pod("a-1", "a", runningReady)
	secondApart()
	f.pod("a-2", "a", runningReady)
	f.pod("a-3", "a", notReady)
	f.lock("pool", "a", func(s *lockv1.DistributedLockSpec) { s.Slots = 3 })
	f.lock("one", "a", nil) // a one-slot lock, listed beside it as before
	l := f.get("pool")
	l.Status = slotsStatus(string(a0.UID), string(a1.UID), time.Now())
	if err := k8s.Status().Update(context.Background(), l); err != nil {
		t.Fatalf("write the 3-slot status: %v", err)
	}

	code, out, _ := dlock(t, "get", "-n", f.ns)
	if code != exitOK {
		t.Fatalf("get exited %d", code)
	}
	for _, want := range [][]string{{"pool[0]", "a-0", "5", "Held", "-"}, {"pool[1]", "a-1", "9", "Held", "-"},
		{"pool[2]", "-", "-", "Pending", "-"}, {"one", "-", "-", "-", "-"}} {
		if r := row(t, out, want...); len(r) != 6 {
			t.Errorf("get row = %q, want %q and an AGE", r, want)
		}
	}
	if strings.Contains(out, "pool ") || strings.Contains(out, "pool[3]") {
		t.Errorf("get shows a row for the 3-slot lock other than its slots 0 to 2:\n%s", out)
	}

	code, out, _ = dlock(t, "history", "pool", "-n", f.ns)
	if code != exitOK {
		t.Fatalf("history exited %d", code)
	}
	sections := regexp.MustCompile(`(?m)^slot (\d):`).FindAllStringSubmatchIndex(out, -1)
	if !strings.HasPrefix(out, "lock "+f.ns+"/pool: 3 slots") || len(sections) != 3 {
		t.Fatalf("history of the 3-slot lock has %d slot sections, want a header and 3:\n%s", len(sections), out)
	}
	section := func(i int) string {
		end := len(out)
		if i+1 < len(sections) {
			end = sections[i+1][0]
		}
		return out[sections[i][0]:end]
	}
	for i, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?s)^slot 0:\nTOKEN .*\n5 +a-0 .*\(open\) .* Granted\n+$`),
		regexp.MustCompile(`(?s)^slot 1:\nTOKEN .*\n9 +a-1 .*\(open\) .* Granted\n7 +old-1 .* OperatorRelease: drain node-3\n+$`),
		regexp.MustCompile(`(?s)^slot 2:\nTOKEN .*\n8 +gone-2 .* HolderGone\n$`),
	} {
		if !want.MatchString(section(i)) {
			t.Errorf("history section %d =\n%s\nwant it to match %s", i, section(i), want)
		}
	}

	code, out, _ = dlock(t, "why", "pool", "-n", f.ns)
	if code != exitOK {
		t.Fatalf("why exited %d", code)
	}
	if !strings.HasPrefix(out, "lock "+f.ns+"/pool: 3 slots, 2/3 held, strategy OldestReady") {
		t.Errorf("why header of the 3-slot lock:\n%s", out)
	}
	parts := regexp.MustCompile(`(?m)^slot `).Split(out, -1)
	if len(parts) != 4 {
		t.Fatalf("why has %d slot sections, want 3:\n%s", len(parts)-1, out)
	}
	for i, tc := range []struct {
		head    string
		pods    []string // the candidates listed, best first
		next    string
		missing []string
	}{
		{"0: phase Held, holder a-0 (token 5), Held=True HolderPublished since ", []string{"a-0", "a-2", "a-3"},
			"next: a-0 holds the lock (token 5); when its term ends a-2 is granted", []string{"a-1"}},
		{"1: phase Held, holder a-1 (token 9), Held=True HolderPublished since ", []string{"a-1", "a-2", "a-3"},
			"next: a-1 holds the lock (token 9); when its term ends a-2 is granted", []string{"a-0"}},
		{"2: phase Pending, Held=False NoHolder since ", []string{"a-2", "a-3"},
			"next: no holder: a-2 is granted next, the oldest eligible pod (strategy OldestReady)", []string{"a-0", "a-1"}},
	} {
		sec := parts[i+1]
		if !strings.HasPrefix(sec, tc.head) || !strings.Contains(sec, tc.next) {
			t.Errorf("why slot %d =\n%s\nwant it to begin %q and say %q", i, sec, tc.head, tc.next)
		}
		var listed []string
		for _, line := range strings.Split(sec, "\n")[2:] {
			if strings.HasPrefix(line, "next: ") {
				break
			}
			if f := strings.Fields(line); len(f) > 1 {
				listed = append(listed, f[0])
			}
		}
		if strings.Join(listed, " ") != strings.Join(tc.pods, " ") {
			t.Errorf("why slot %d lists %v, want %v (the pods holding other slots left out):\n%s", i, listed, tc.pods, sec)
		}
	}
	if r := row(t, parts[3], "a-2"); strings.Join(r[1:], "|") != "yes|next|is Running and Ready" {
		t.Errorf("why slot 2 row for a-2 = %q, want it eligible and next", r)
	}

	// release: the slot must be named; --slot and --holder name a slot's own token.
	if code, _, errOut := dlock(t, "release", "pool", "-n", f.ns, "--reason", "x"); code != exitUsage || !strings.Contains(errOut, "has 3 slots: name the term to end") {
		t.Errorf("release of a 3-slot lock without --slot = %d %q, want %d asking for the slot", code, errOut, exitUsage)
	}
	if code, _, errOut := dlock(t, "release", "pool", "-n", f.ns, "--reason", "x", "--slot", "2"); code != exitRefused || !strings.Contains(errOut, "slot 2 has no holder") {
		t.Errorf("release --slot 2 (free) = %d %q, want %d", code, errOut, exitRefused)
	}
	if code, _, errOut := dlock(t, "release", "pool", "-n", f.ns, "--reason", "x", "--slot", "16"); code != exitUsage {
		t.Errorf("release --slot 16 = %d %q, want %d", code, errOut, exitUsage)
	}
	if a := f.get("pool").Annotations; a[lockv1.AnnotationReleaseRequest] != "" {
		t.Fatalf("a refused release wrote %v", a)
	}
	code, out, _ = dlock(t, "release", "pool", "-n", f.ns, "--reason", "drain node-3", "--slot", "1")
	if a := f.get("pool").Annotations; code != exitOK || a[lockv1.AnnotationReleaseRequest] != "9" || a[lockv1.AnnotationReleaseReason] != "drain node-3" {
		t.Errorf("release --slot 1 = %d, annotations %v; want %s=9 (slot 1's token)", code, a, lockv1.AnnotationReleaseRequest)
	}
	if !strings.Contains(out, "release of the term of a-1 in slot 1 (token 9) requested") {
		t.Errorf("release --slot 1 output does not name slot 1:\n%s", out)
	}
	// No controller acts on slot 1's request here: the next request replaces it, and says so.
	code, out, _ = dlock(t, "release", "pool", "-n", f.ns, "--reason", "x", "--holder", "a-0")
	if a := f.get("pool").Annotations; code != exitOK || a[lockv1.AnnotationReleaseRequest] != "5" {
		t.Errorf("release --holder a-0 = %d, annotations %v; want %s=5 (slot 0's token)", code, a, lockv1.AnnotationReleaseRequest)
	}
	if want := "It replaces the request to release slot 1, which the controller had not acted on"; !strings.Contains(out, want) {
		t.Errorf("release --holder a-0 after slot 1's request does not say %q:\n%s", want, out)
	}
	if code, _, errOut := dlock(t, "release", "pool", "-n", f.ns, "--reason", "x", "--holder", "a-2"); code != exitRefused || !strings.Contains(errOut, "holds none of its slots") {
		t.Errorf("release --holder a-2 = %d %q, want %d", code, errOut, exitRefused)
	}
}

// TestWhySlotAllCandidatesHoldOtherSlots: a free slot whose selector matches only pods that
// hold the lock's other slots says so, as its Held condition does, instead of "0 pods match
// spec.candidates.selector" (it printed that before the fix: the pods are there, each holds
// another slot).
func TestWhySlotAllCandidatesHoldOtherSlots(t *testing.T) {
	pod := func(name, uid string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID(uid),
			Labels: map[string]string{"app": "a"}, CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}}
		runningReady(&p.Status)
		return p
	}
	l := testLock(func(l *lockv1.DistributedLock) {
		l.Name, l.Spec.Slots, l.Status = "pool", 3, slotsStatus("u0", "u1", t0)
		l.Spec.Candidates.Selector = lockv1.MatchLabels(map[string]string{"app": "a"})
	})
	var b strings.Builder
	if err := writeWhy(&b, l, []corev1.Pod{pod("a-0", "u0"), pod("a-1", "u1")}, map[types.UID]bool{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	parts := regexp.MustCompile(`(?m)^slot `).Split(out, -1)
	if len(parts) != 4 {
		t.Fatalf("why has %d slot sections, want 3:\n%s", len(parts)-1, out)
	}
	if want := "next: " + eligibility.AllHoldOtherSlots; !strings.Contains(parts[3], want) || strings.Contains(parts[3], "0 pods match") {
		t.Errorf("why slot %s\nwant it to say %q", parts[3], want)
	}
	for i, sec := range parts[1:3] {
		if strings.Contains(sec, eligibility.AllHoldOtherSlots) {
			t.Errorf("why slot %d, a held slot, says %q:\n%s", i, eligibility.AllHoldOtherSlots, sec)
		}
	}
}
