package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/eligibility"
)

func newWhyCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "why NAME",
		Short: "Explain each candidate: eligible or not and why, and who is granted next",
		Long: `why reads the lock and its candidate pods (the pods of its namespace that
spec.candidates.selector matches) from the API server, and judges each pod with the
controller's own rules (pkg/eligibility, which the controller grants by): eligible means
Running, Ready=True and not being deleted. Candidates are listed in the order spec.strategy prefers them; the first
eligible one is granted next (now when the lock has no holder, when the current term ends
otherwise). A published holder the selector no longer matches is listed too.

A lock with more than one slot (spec.slots) is explained slot by slot: each slot's holder,
token, phase and Held condition, its candidates without the pods that hold other slots, and
who that slot is granted to next. Each slot is judged on its own, so several free slots can
name the same next pod.

A Global lock (spec.scope Global) is explained for this cluster's candidates: where the
global term is (held here, with its round, or by another cluster, by name and token) and
which local pod this cluster grants once the grant is free to it.`,
		Example: `  kubectl dlock why payments-leader -n shop`,
		Args:    exactArgs(1, "one NAME"),
		RunE: func(c *cobra.Command, args []string) error {
			s, err := o.connect()
			if err != nil {
				return err
			}
			l, err := s.getLock(c.Context(), args[0])
			if err != nil {
				return err
			}
			pods, gone, err := s.candidates(c.Context(), l)
			if err != nil {
				return err
			}
			return writeWhy(o.out, l, pods, gone)
		},
	}
}

// candidates lists the pods the lock's selector matches, plus each published holder (of any
// slot) the selector no longer matches. gone holds the UIDs of the holders the API server has
// no pod for (by name and UID).
func (s *session) candidates(ctx context.Context, l *lockv1.DistributedLock) (pods []corev1.Pod, gone map[types.UID]bool, err error) {
	if sel := l.Spec.Candidates.Selector; sel != nil {
		selector, err := sel.AsSelector()
		if err == nil {
			var list corev1.PodList
			if err := s.c.List(ctx, &list, client.InNamespace(l.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
				return nil, nil, fmt.Errorf("list candidate pods of %s/%s: %w", l.Namespace, l.Name, explainAPIError(err, l.Namespace))
			}
			pods = list.Items
		}
	}
	gone = map[types.UID]bool{}
	for slot := range slotCount(l) {
		v := l.Status.SlotView(slot)
		if l.Spec.IsGlobal() {
			v = *globalView(l)
		}
		uid := v.HolderUID
		if uid == "" || slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.UID == uid }) {
			continue
		}
		var h corev1.Pod
		err = s.c.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: v.Holder}, &h)
		switch {
		case apierrors.IsNotFound(err):
			gone[uid] = true
		case err != nil:
			return nil, nil, fmt.Errorf("get holder pod %s/%s: %w", l.Namespace, v.Holder, explainAPIError(err, l.Namespace))
		case h.UID != uid:
			gone[uid] = true
		default:
			pods = append(pods, h)
		}
	}
	return pods, gone, nil
}

// writeWhy prints the explanation: for a one-slot lock a header, one row per candidate, and
// who is next; for a lock of several slots a header, then that for each slot, whose
// candidates leave out the pods that hold other slots (as the controller grants).
func writeWhy(w io.Writer, l *lockv1.DistributedLock, pods []corev1.Pod, gone map[types.UID]bool) error {
	st := &l.Status
	strategy := l.Spec.Strategy
	if strategy == lockv1.StrategyPreferred {
		strategy += " (" + lockv1.Strategy(l.Spec.PreferredHolder) + ")"
	}
	n := slotCount(l)
	if l.Spec.IsGlobal() {
		st := globalView(l)
		ex := eligibility.Explain(&l.Spec, st, pods)
		next := "next: " + ex.Summary
		if l.Status.GlobalHolderUID == "" && l.Status.GlobalCluster != "" {
			next = fmt.Sprintf("next: nothing while cluster %s holds the term; when its grant is gone, this cluster waits the lock delay (%ds) before it grants %s", l.Status.GlobalCluster, l.Spec.EffectiveLockDelaySeconds(), orDash(ex.Next))
		}
		return writeWhySlot(w, l, globalHead(l), ex, next, gone[st.HolderUID])
	}
	if n == 1 {
		head := fmt.Sprintf("lock %s/%s: phase %s, strategy %s", l.Namespace, l.Name, orDash(string(st.Phase)), strategy)
		if st.Holder != "" {
			head += fmt.Sprintf(", holder %s (token %d)", st.Holder, st.FencingToken)
		}
		ex := eligibility.Explain(&l.Spec, st, pods)
		return writeWhySlot(w, l, head, ex, "next: "+ex.Summary, gone[st.HolderUID])
	}
	fmt.Fprintf(w, "lock %s/%s: %d slots, %s held, strategy %s; each slot's candidates leave out the pods that hold other slots\n",
		l.Namespace, l.Name, l.Spec.EffectiveSlots(), st.HeldSummary(l.Spec.EffectiveSlots()), strategy)
	for slot := range n {
		sl := slotLock(l, slot)
		v := &sl.Status
		others := st.Holders(slot)
		own := slices.DeleteFunc(slices.Clone(pods), func(p corev1.Pod) bool { _, ok := others[p.UID]; return ok })
		ex := eligibility.Explain(&l.Spec, v, own)
		head := fmt.Sprintf("slot %d%s: phase %s", slot, removedNote(l, slot), orDash(string(v.Phase)))
		if v.Holder != "" {
			head += fmt.Sprintf(", holder %s (token %d)", v.Holder, v.FencingToken)
		}
		if held := meta.FindStatusCondition(v.Conditions, lockv1.ConditionHeld); held != nil {
			head += fmt.Sprintf(", Held=%s %s since %s", held.Status, held.Reason, utc(held.LastTransitionTime.Time))
		}
		next := "next: " + ex.Summary
		if v.HolderUID == "" && len(own) == 0 && len(pods) > 0 {
			next = "next: " + eligibility.AllHoldOtherSlots
		}
		if slot >= l.Spec.EffectiveSlots() {
			next = fmt.Sprintf("next: nothing: the slot is removed once its term ends (spec.slots is %d)", l.Spec.EffectiveSlots())
		}
		fmt.Fprintln(w)
		if err := writeWhySlot(w, sl, head, ex, next, gone[v.HolderUID]); err != nil {
			return err
		}
	}
	return nil
}

// writeWhySlot prints one term's explanation: head, one row per candidate, a gone holder,
// next (unless the lock is being deleted) and a Valid=False condition.
func writeWhySlot(w io.Writer, l *lockv1.DistributedLock, head string, ex eligibility.Explanation, next string, holderGone bool) error {
	st := &l.Status
	fmt.Fprintln(w, head)
	if len(ex.Candidates) > 0 {
		rows := [][]string{{"POD", "ELIGIBLE", "ROLE", "REASON"}}
		for _, c := range ex.Candidates {
			rows = append(rows, []string{c.Name, yesNo(c.Eligible), roles(c, ex), reasonText(c)})
		}
		if err := printTable(w, rows); err != nil {
			return err
		}
	}
	if holderGone {
		fmt.Fprintf(w, "holder %s (UID %s) no longer exists: the controller ends its term (HolderGone).\n", st.Holder, st.HolderUID)
	}
	if l.DeletionTimestamp != nil {
		fmt.Fprintln(w, "the lock is being deleted: the manager ends its term (Releasing, then the lock delay) and grants nothing more.")
	} else {
		fmt.Fprintln(w, next)
	}
	if v := meta.FindStatusCondition(st.Conditions, lockv1.ConditionValid); v != nil && v.Status == metav1.ConditionFalse {
		fmt.Fprintf(w, "Valid=False %s: %s\n", v.Reason, v.Message)
	}
	return nil
}

func reasonText(c eligibility.Candidate) string {
	if c.Detail == "" {
		return c.Reason
	}
	return c.Reason + ": " + c.Detail
}

func roles(c eligibility.Candidate, ex eligibility.Explanation) string {
	var r []string
	if c.Holder {
		r = append(r, "holder")
	}
	if c.Name == ex.Next && c.UID == ex.NextUID {
		r = append(r, "next")
	}
	if c.Preferred {
		r = append(r, "preferred")
	}
	if len(r) == 0 {
		return "-"
	}
	return strings.Join(r, ",")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
