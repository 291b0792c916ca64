package controllers

import (
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/podtest"
)

// TestPublishGrantClosesOpenTerms: adopting an unpublished grant for the published holder
// (its key vanished, the regrant's status write was lost) leaves no history entry open
// besides the new term.
func TestPublishGrantClosesOpenTerms(t *testing.T) {
	st := &lockv1.DistributedLockStatus{
		Phase: lockv1.PhaseHeld, Holder: "a-0", HolderUID: "uid-a-0", FencingToken: 5, MaxFencingToken: 5,
		History: []lockv1.Term{{Holder: "a-0", HolderUID: "uid-a-0", Token: 5, Reason: lockv1.ReasonGranted}},
	}
	now := metav1.Now()
	publishGrant(st, "a-0", grant{holderUID: "uid-a-0", token: 9, rec: record{LeaseSeconds: 10}}, 0, lockv1.ReasonGranted, now)
	if len(st.History) != 2 {
		t.Fatalf("history has %d entries, want 2", len(st.History))
	}
	if open := st.History[0]; open.Token != 9 || open.Ended != nil {
		t.Errorf("history[0] = token %d ended %v, want the open term 9", open.Token, open.Ended)
	}
	if old := st.History[1]; old.Ended == nil || old.Reason != lockv1.ReasonKeyVanished {
		t.Errorf("history[1] = ended %v reason %q, want ended with %s", old.Ended, old.Reason, lockv1.ReasonKeyVanished)
	}
}

// TestEtcdReplaced: the probe wakes every lock when etcd answers as another cluster or with
// a revision that went back (a restore), not on a revision that moved on.
func TestEtcdReplaced(t *testing.T) {
	seen := etcdIdentity{cluster: 7, revision: 100}
	for _, tc := range []struct {
		name     string
		cluster  uint64
		revision int64
		want     bool
	}{
		{"same cluster, later revision", 7, 120, false},
		{"same cluster, same revision", 7, 100, false},
		{"same cluster, revision went back (restore without --bump-revision)", 7, 40, true},
		{"another cluster (restore makes a new one)", 8, 1_000_000_100, true},
	} {
		if got := seen.replacedBy(tc.cluster, tc.revision); got != tc.want {
			t.Errorf("%s: replacedBy = %v, want %v", tc.name, got, tc.want)
		}
	}
	if (etcdIdentity{}).replacedBy(7, 1) {
		t.Errorf("the first answer counted as a replacement")
	}
}

// TestNoHolderMessage: the Held=False NoHolder message names the best candidate's reason.
func TestNoHolderMessage(t *testing.T) {
	spec := &lockv1.DistributedLockSpec{
		Candidates:           lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"app": "a"})},
		LeaseDurationSeconds: 10, Strategy: lockv1.StrategyOldestReady,
	}
	none := &lockv1.DistributedLockStatus{Phase: lockv1.PhasePending}
	for _, tc := range []struct {
		name   string
		selErr error
		pods   []corev1.Pod
		want   string
	}{
		{"pending", nil, []corev1.Pod{*testPod("a-0", podtest.Unscheduled())}, "no eligible candidate: pod a-0 is Pending (Unschedulable)"},
		{"not ready", nil, []corev1.Pod{*testPod("a-0", notReady())}, "no eligible candidate: pod a-0 is not Ready (Ready=False)"},
		{"terminating", nil, []corev1.Pod{*testPod("a-0", deleting())}, "no eligible candidate: pod a-0 is terminating"},
		{"no pods", nil, nil, "no eligible candidate: 0 pods match spec.candidates.selector"},
		{"eligible, not granted yet", nil, []corev1.Pod{*testPod("a-0")}, "no holder yet: pod a-0 is eligible and is granted next"},
		{"selector unusable", errSelectorForTest, nil, "no eligible candidate: spec.candidates.selector cannot be used (see the Valid condition)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := noHolderMessage(spec, none, tc.selErr, tc.pods); got != tc.want {
				t.Errorf("noHolderMessage = %q, want %q", got, tc.want)
			}
		})
	}
}

var errSelectorForTest = errors.New("bad selector")
