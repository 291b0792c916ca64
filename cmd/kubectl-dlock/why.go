package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
otherwise). A published holder the selector no longer matches is listed too.`,
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
			pods, holderGone, err := s.candidates(c.Context(), l)
			if err != nil {
				return err
			}
			return writeWhy(o.out, l, eligibility.Explain(&l.Spec, &l.Status, pods), holderGone)
		},
	}
}

// candidates lists the pods the lock's selector matches, plus the published holder when the
// selector no longer matches it. holderGone is true when the API server has no pod with the
// holder's name and UID.
func (s *session) candidates(ctx context.Context, l *lockv1.DistributedLock) (pods []corev1.Pod, holderGone bool, err error) {
	if sel := l.Spec.Candidates.Selector; sel != nil {
		selector, err := sel.AsSelector()
		if err == nil {
			var list corev1.PodList
			if err := s.c.List(ctx, &list, client.InNamespace(l.Namespace), client.MatchingLabelsSelector{Selector: selector}); err != nil {
				return nil, false, fmt.Errorf("list candidate pods of %s/%s: %w", l.Namespace, l.Name, explainAPIError(err, l.Namespace))
			}
			pods = list.Items
		}
	}
	uid := l.Status.HolderUID
	if uid == "" {
		return pods, false, nil
	}
	for i := range pods {
		if pods[i].UID == uid {
			return pods, false, nil
		}
	}
	var h corev1.Pod
	err = s.c.Get(ctx, client.ObjectKey{Namespace: l.Namespace, Name: l.Status.Holder}, &h)
	switch {
	case apierrors.IsNotFound(err):
		return pods, true, nil
	case err != nil:
		return nil, false, fmt.Errorf("get holder pod %s/%s: %w", l.Namespace, l.Status.Holder, explainAPIError(err, l.Namespace))
	case h.UID != uid:
		return pods, true, nil
	}
	return append(pods, h), false, nil
}

// writeWhy prints the explanation: a header, one row per candidate, and who is next.
func writeWhy(w io.Writer, l *lockv1.DistributedLock, ex eligibility.Explanation, holderGone bool) error {
	st := &l.Status
	strategy := l.Spec.Strategy
	if strategy == lockv1.StrategyPreferred {
		strategy += " (" + lockv1.Strategy(l.Spec.PreferredHolder) + ")"
	}
	head := fmt.Sprintf("lock %s/%s: phase %s, strategy %s", l.Namespace, l.Name, orDash(string(st.Phase)), strategy)
	if st.Holder != "" {
		head += fmt.Sprintf(", holder %s (token %d)", st.Holder, st.FencingToken)
	}
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
		fmt.Fprintln(w, "next: "+ex.Summary)
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
