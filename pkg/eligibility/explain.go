package eligibility

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Candidate is one pod as the controller judges it.
type Candidate struct {
	// Name and UID identify the pod.
	Name string
	UID  types.UID
	// Eligible is true when the pod may be granted the lock.
	Eligible bool
	// Code is why it may not; "" when Eligible.
	Code Ineligibility
	// Reason is one line that completes "pod <name> ...": "is Pending (Unschedulable)". It
	// changes only when the pod's state does (no times, no counts).
	Reason string
	// Detail is the pod's own words when it has some (a condition message, a container's
	// last exit); it may be empty.
	Detail string
	// Holder: the pod is the published holder.
	Holder bool
	// Preferred: the pod is spec.preferredHolder under strategy Preferred.
	Preferred bool
}

// Explanation is what the controller would do with a lock's candidates.
type Explanation struct {
	// Candidates are the pods given, the selected ones in the strategy's order of preference
	// (best first), then the pods the selector does not match, by name.
	Candidates []Candidate
	// Next is the pod the controller grants next: now when the lock has no holder, once the
	// current term ends otherwise. Empty when none would be.
	Next string
	// NextUID is Next's UID.
	NextUID types.UID
	// Summary says in one sentence who is granted next and why, or why nobody is.
	Summary string
}

// Explain judges every pod by the rules the controller grants by (Choose, Eligible) and
// says who is granted next under spec.strategy. pods are the pods to explain, normally those
// of the lock's namespace the selector matches; pods it does not match are listed as
// PodNotSelected, as the controller never considers them. Explain reads no clock.
func Explain(spec *lockv1.DistributedLockSpec, st *lockv1.DistributedLockStatus, pods []corev1.Pod) Explanation {
	var ex Explanation
	sel, selErr := selectorOf(spec)
	var matched, other []corev1.Pod
	for i := range pods {
		if selErr == nil && sel.Matches(labels.Set(pods[i].Labels)) {
			matched = append(matched, pods[i])
		} else {
			other = append(other, pods[i])
		}
	}
	for _, p := range rank(spec, matched) {
		ex.Candidates = append(ex.Candidates, judgeCandidate(spec, st, p))
	}
	sort.SliceStable(other, func(i, j int) bool { return other[i].Name < other[j].Name })
	for i := range other {
		c := judgeCandidate(spec, st, &other[i])
		c.Eligible, c.Code, c.Detail = false, PodNotSelected, ""
		c.Reason = "does not match spec.candidates.selector"
		if selErr != nil {
			c.Reason = "is not selected: spec.candidates.selector cannot be used"
		}
		ex.Candidates = append(ex.Candidates, c)
	}
	if selErr != nil {
		ex.Summary = fmt.Sprintf("nothing is granted: %v", selErr)
		return ex
	}
	if spec.Suspend {
		ex.Summary = "nothing is granted: spec.suspend is true"
		return ex
	}
	next := Choose(spec, matched, string(st.HolderUID))
	if next != nil {
		ex.Next, ex.NextUID = next.Name, next.UID
	}
	ex.Summary = summarize(spec, st, &ex, len(matched))
	return ex
}

// selectorOf is the lock's selector, as the controller parses it.
func selectorOf(spec *lockv1.DistributedLockSpec) (labels.Selector, error) {
	if spec.Candidates.Selector == nil {
		return nil, fmt.Errorf("spec.candidates.selector is not set")
	}
	sel, err := spec.Candidates.Selector.AsSelector()
	if err != nil {
		return nil, fmt.Errorf("spec.candidates.selector: %w", err)
	}
	return sel, nil
}

// summarize is the Summary of an explanation whose Next is set (or not) already.
func summarize(spec *lockv1.DistributedLockSpec, st *lockv1.DistributedLockStatus, ex *Explanation, selected int) string {
	var s string
	switch {
	case st.HolderUID == "" && ex.Next != "":
		s = fmt.Sprintf("no holder: %s is granted next, %s", ex.Next, nextWhy(spec, ex))
	case st.HolderUID == "":
		return NoEligibleMessage(ex, selected)
	case st.Phase == lockv1.PhaseReleasing && ex.Next != "":
		s = fmt.Sprintf("the term of %s (token %d) is ending: after the lock delay %s is granted, %s",
			st.Holder, st.FencingToken, ex.Next, nextWhy(spec, ex))
	case st.Phase == lockv1.PhaseReleasing:
		s = fmt.Sprintf("the term of %s (token %d) is ending and no other candidate is eligible to follow it", st.Holder, st.FencingToken)
	case ex.Next != "":
		s = fmt.Sprintf("%s holds the lock (token %d); when its term ends %s is granted, %s",
			st.Holder, st.FencingToken, ex.Next, nextWhy(spec, ex))
	default:
		s = fmt.Sprintf("%s holds the lock (token %d); no other candidate is eligible to follow it", st.Holder, st.FencingToken)
	}
	if c := preferredCandidate(ex); st.HolderUID != "" && c != nil && c.Eligible && !c.Holder && st.Phase == lockv1.PhaseHeld {
		s += fmt.Sprintf("; %s (spec.preferredHolder) takes over once it has been eligible for the lock delay (%d s)",
			c.Name, spec.EffectiveLockDelaySeconds())
	}
	return s
}

// AllHoldOtherSlots is why a slot of a lock of several slots is granted to nobody when every
// pod its selector matches holds another slot of the lock (a pod holds at most one slot): the
// slot's Held=False NoHolder message and what kubectl dlock why says of it.
const AllHoldOtherSlots = "no eligible candidate: every selected pod holds another slot of this lock"

// NoEligibleMessage says why nobody is granted: no pod selected, or why the best candidate
// (the first in the strategy's order) is not eligible. It is the Held=False NoHolder
// condition's message, so it contains no times or counts that change without the pods.
func NoEligibleMessage(ex *Explanation, selected int) string {
	if selected == 0 {
		return "no eligible candidate: 0 pods match spec.candidates.selector"
	}
	for _, c := range ex.Candidates {
		if c.Code != PodNotSelected && !c.Holder {
			return fmt.Sprintf("no eligible candidate: pod %s %s", c.Name, c.Reason)
		}
	}
	return "no eligible candidate: no selected pod besides the holder"
}

// nextWhy says why Next is the strategy's choice.
func nextWhy(spec *lockv1.DistributedLockSpec, ex *Explanation) string {
	switch spec.Strategy {
	case lockv1.StrategyFirstReady:
		return "the eligible pod Ready the longest (strategy FirstReady)"
	case lockv1.StrategyPreferred:
		if ex.Next == spec.PreferredHolder {
			return "spec.preferredHolder (strategy Preferred)"
		}
		why := "is not selected"
		if c := preferredCandidate(ex); c != nil && c.Holder {
			why = "holds the lock now"
		} else if c != nil {
			why = c.Reason
		}
		return fmt.Sprintf("the oldest eligible pod, as spec.preferredHolder %s %s (strategy Preferred)", spec.PreferredHolder, why)
	}
	return "the oldest eligible pod (strategy OldestReady)"
}

func preferredCandidate(ex *Explanation) *Candidate {
	for i := range ex.Candidates {
		if ex.Candidates[i].Preferred && ex.Candidates[i].Code != PodNotSelected {
			return &ex.Candidates[i]
		}
	}
	return nil
}

// judgeCandidate is one selected pod's Candidate.
func judgeCandidate(spec *lockv1.DistributedLockSpec, st *lockv1.DistributedLockStatus, p *corev1.Pod) Candidate {
	c := Candidate{
		Name: p.Name, UID: p.UID,
		Holder:    st.HolderUID != "" && p.UID == st.HolderUID,
		Preferred: spec.Strategy == lockv1.StrategyPreferred && p.Name == spec.PreferredHolder,
	}
	c.Code, c.Reason, c.Detail = describePod(p)
	c.Eligible = c.Code == ""
	return c
}

// describePod refines notEligible's answer from the pod's status.
func describePod(p *corev1.Pod) (Ineligibility, string, string) {
	switch notEligible(p) {
	case "":
		return "", "is Running and Ready", ""
	case PodTerminating:
		detail := "deletion requested"
		if g := p.DeletionGracePeriodSeconds; g != nil {
			detail = fmt.Sprintf("deletion requested with a grace period of %d s", *g)
		}
		return PodTerminating, "is terminating", detail
	case PodNotRunning:
		return describeNotRunning(p)
	}
	return describeNotReady(p)
}

// shorten keeps a message to one line of at most n characters.
func shorten(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-3] + "..."
	}
	return s
}
