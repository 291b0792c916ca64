package eligibility

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/podtest"
)

func explainSpec(opts ...func(*lockv1.DistributedLockSpec)) *lockv1.DistributedLockSpec {
	s := &lockv1.DistributedLockSpec{
		Candidates:           lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"app": "a"})},
		LeaseDurationSeconds: 10, Strategy: lockv1.StrategyOldestReady,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// The pod builders of internal/podtest, under the names the controller's tests use.
var (
	testPod       = podtest.Pod
	phase         = podtest.Phase
	notReady      = podtest.NotReady
	podConditions = podtest.Conditions
	containers    = podtest.Containers
	terminated    = podtest.Terminated
	waiting       = podtest.Waiting
	deleting      = podtest.Deleting
	created       = podtest.Created
	labelled      = podtest.Labelled
	unscheduled   = podtest.Unscheduled
)

type podOpt = podtest.Opt

// TestExplainEligibility: each eligibility case gets its code and reason, and Eligible agrees
// with the rule the controller grants by (eligible) for every pod.
func TestExplainEligibility(t *testing.T) {
	for _, tc := range []struct {
		name       string
		pod        *corev1.Pod
		code       Ineligibility
		reason     string
		detailPart string
	}{
		{"running and ready", testPod("a-0"), "", "is Running and Ready", ""},
		{"terminating", testPod("a-0", deleting()), PodTerminating, "is terminating", "deletion requested"},
		{"terminating wins over not ready", testPod("a-0", deleting(), notReady()), PodTerminating, "is terminating", ""},
		{"unschedulable", testPod("a-0", unscheduled()), PodNotScheduled, "is Pending (Unschedulable)", "Insufficient cpu"},
		{"pending, not bound, no condition", testPod("a-0", phase(corev1.PodPending), podConditions(), containers()),
			PodNotScheduled, "is Pending (not scheduled)", ""},
		{"pending on a node, image pull", testPod("a-0", phase(corev1.PodPending), podConditions(
			corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}),
			containers(corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "ImagePullBackOff", Message: "Back-off pulling image"}}})),
			PodPending, "is Pending (ImagePullBackOff)", "container app: Back-off pulling image"},
		{"pending, init container running", testPod("a-0", phase(corev1.PodPending), podConditions(
			corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}),
			func(p *corev1.Pod) {
				p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "migrate", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}
			}),
			PodPending, "is Pending (init container migrate running)", ""},
		{"succeeded", testPod("a-0", phase(corev1.PodSucceeded)), PodFinished, "has Succeeded", ""},
		{"failed, evicted", testPod("a-0", phase(corev1.PodFailed), func(p *corev1.Pod) {
			p.Status.Reason, p.Status.Message = "Evicted", "The node was low on resource: memory."
		}), PodFinished, "has Failed (Evicted)", "low on resource"},
		{"no phase yet", testPod("a-0", phase("")), PodNotRunning, "has no phase yet", ""},
		{"unknown phase", testPod("a-0", phase(corev1.PodUnknown)), PodNotRunning, "has phase Unknown", ""},
		{"not ready, with the kubelet's reason", testPod("a-0", podConditions(corev1.PodCondition{Type: corev1.PodReady,
			Status: corev1.ConditionFalse, Reason: "ContainersNotReady", Message: "containers with unready status: [app]"})),
			PodNotReady, "is not Ready (ContainersNotReady)", "containers with unready status: [app]"},
		{"not ready, no reason", testPod("a-0", notReady()), PodNotReady, "is not Ready (Ready=False)", ""},
		{"no ready condition", testPod("a-0", podConditions()), PodNotReady, "is not Ready (no Ready condition yet)", ""},
		{"crashed, awaiting restart (terminated, phase Running)", testPod("a-0", notReady(), containers(terminated("app", 1))),
			PodRestarting, "is not Ready (container app is restarting)", "last exit code 1"},
		{"crash loop back-off", testPod("a-0", notReady(), containers(waiting("app", 3))),
			PodRestarting, "is not Ready (container app is restarting)", "CrashLoopBackOff; restarts: 3"},
		{"ready but not selected", testPod("a-0", labelled("app", "b")), PodNotSelected, "does not match spec.candidates.selector", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := Explain(explainSpec(), &lockv1.DistributedLockStatus{}, []corev1.Pod{*tc.pod})
			if len(ex.Candidates) != 1 {
				t.Fatalf("Explain listed %d candidates, want 1", len(ex.Candidates))
			}
			c := ex.Candidates[0]
			if c.Code != tc.code || c.Reason != tc.reason {
				t.Errorf("candidate = (%q, %q), want (%q, %q)", c.Code, c.Reason, tc.code, tc.reason)
			}
			if !strings.Contains(c.Detail, tc.detailPart) {
				t.Errorf("detail = %q, want it to contain %q", c.Detail, tc.detailPart)
			}
			selected := tc.code != PodNotSelected
			if want := selected && Eligible(tc.pod); c.Eligible != want {
				t.Errorf("Eligible = %v, but the controller's rule says %v", c.Eligible, want)
			}
			if want := selected && Eligible(tc.pod); (ex.Next == "a-0") != want {
				t.Errorf("Next = %q, want a-0 chosen: %v", ex.Next, want)
			}
		})
	}
}

// TestExplainNext: Next is Choose's answer under each strategy and status, in the order Explain
// lists the candidates, with a summary that says why.
func TestExplainNext(t *testing.T) {
	held := &lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, Holder: "a-0", HolderUID: "uid-a-0", FencingToken: 7}
	releasing := held.DeepCopy()
	releasing.Phase = lockv1.PhaseReleasing
	none := &lockv1.DistributedLockStatus{Phase: lockv1.PhasePending}
	readyAt := func(sec int64) podOpt {
		return podConditions(corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Unix(sec, 0)})
	}
	preferred := func(s *lockv1.DistributedLockSpec) { s.Strategy, s.PreferredHolder = lockv1.StrategyPreferred, "a-2" }
	pods := func(ps ...*corev1.Pod) []corev1.Pod {
		out := make([]corev1.Pod, len(ps))
		for i, p := range ps {
			out[i] = *p
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		spec    *lockv1.DistributedLockSpec
		st      *lockv1.DistributedLockStatus
		pods    []corev1.Pod
		order   string // candidate names in Explain's order
		next    string
		summary string
	}{
		{"oldest ready, no holder", explainSpec(), none,
			pods(testPod("a-1", created(2)), testPod("a-0", created(1))), "a-0 a-1", "a-0",
			"no holder: a-0 is granted next, the oldest eligible pod (strategy OldestReady)"},
		{"oldest is not eligible: the next oldest", explainSpec(), none,
			pods(testPod("a-0", created(1), notReady()), testPod("a-1", created(2))), "a-0 a-1", "a-1", "no holder: a-1 is granted next"},
		{"first ready", explainSpec(func(s *lockv1.DistributedLockSpec) { s.Strategy = lockv1.StrategyFirstReady }), none,
			pods(testPod("a-0", created(1), readyAt(50)), testPod("a-1", created(2), readyAt(10))), "a-1 a-0", "a-1",
			"the eligible pod Ready the longest (strategy FirstReady)"},
		{"preferred and eligible", explainSpec(preferred), none,
			pods(testPod("a-0", created(1)), testPod("a-2", created(3))), "a-2 a-0", "a-2", "spec.preferredHolder (strategy Preferred)"},
		{"preferred not eligible", explainSpec(preferred), none,
			pods(testPod("a-0", created(1)), testPod("a-2", created(3), unscheduled())), "a-2 a-0", "a-0",
			"as spec.preferredHolder a-2 is Pending (Unschedulable) (strategy Preferred)"},
		{"held: the next excludes the holder", explainSpec(), held,
			pods(testPod("a-0", created(1)), testPod("a-1", created(2))), "a-0 a-1", "a-1",
			"a-0 holds the lock (token 7); when its term ends a-1 is granted"},
		{"held, nobody to follow", explainSpec(), held,
			pods(testPod("a-0", created(1)), testPod("a-1", created(2), deleting())), "a-0 a-1", "",
			"no other candidate is eligible to follow it"},
		{"held, preferred waits to preempt", explainSpec(preferred), held,
			pods(testPod("a-0", created(1)), testPod("a-2", created(3))), "a-2 a-0", "a-2",
			"a-2 (spec.preferredHolder) takes over once it has been eligible for the lock delay (10 s)"},
		{"releasing", explainSpec(), releasing,
			pods(testPod("a-0", created(1), notReady()), testPod("a-1", created(2))), "a-0 a-1", "a-1",
			"the term of a-0 (token 7) is ending: after the lock delay a-1 is granted"},
		{"suspended", explainSpec(func(s *lockv1.DistributedLockSpec) { s.Suspend = true }), none,
			pods(testPod("a-0")), "a-0", "", "nothing is granted: spec.suspend is true"},
		{"no pod selected", explainSpec(), none,
			pods(testPod("b-0", labelled("app", "b"))), "b-0", "", "no eligible candidate: 0 pods match spec.candidates.selector"},
		{"no pod at all", explainSpec(), none, nil, "", "", "no eligible candidate: 0 pods match spec.candidates.selector"},
		{"none eligible: the best candidate's reason", explainSpec(), none,
			pods(testPod("a-1", created(2), deleting()), testPod("a-0", created(1), unscheduled())), "a-0 a-1", "",
			"no eligible candidate: pod a-0 is Pending (Unschedulable)"},
		{"unusable selector", explainSpec(func(s *lockv1.DistributedLockSpec) { s.Candidates.Selector = nil }), none,
			pods(testPod("a-0")), "a-0", "", "nothing is granted: spec.candidates.selector is not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ex := Explain(tc.spec, tc.st, tc.pods)
			var names []string
			for _, c := range ex.Candidates {
				names = append(names, c.Name)
			}
			if got := strings.Join(names, " "); got != tc.order {
				t.Errorf("order = %q, want %q", got, tc.order)
			}
			if ex.Next != tc.next {
				t.Errorf("Next = %q, want %q", ex.Next, tc.next)
			}
			if !strings.Contains(ex.Summary, tc.summary) {
				t.Errorf("Summary = %q, want it to contain %q", ex.Summary, tc.summary)
			}
			if tc.spec.Candidates.Selector != nil && !tc.spec.Suspend {
				var matched []corev1.Pod
				for _, p := range tc.pods {
					if p.Labels["app"] == "a" {
						matched = append(matched, p)
					}
				}
				want := ""
				if p := Choose(tc.spec, matched, string(tc.st.HolderUID)); p != nil {
					want = p.Name
				}
				if ex.Next != want {
					t.Errorf("Next = %q, but Choose grants %q", ex.Next, want)
				}
			}
		})
	}
}
