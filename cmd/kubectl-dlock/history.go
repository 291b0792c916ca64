package main

import (
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/duration"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

func newHistoryCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "history NAME",
		Short: "Show a lock's last terms: token, holder, start, end, reason",
		Long: `history prints status.history of one lock, newest first: the last 10 terms, each with
its fencing token, holder pod, start and end (UTC, as the controller recorded them; for
display only) and the reason the term began (Granted, Regranted) or ended. A term an operator
ended (kubectl dlock release, reason OperatorRelease) shows the operator's --reason after it.
A lock with more than one slot (spec.slots) shows the terms of each slot, slot by slot.`,
		Example: `  kubectl dlock history payments-leader -n shop`,
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
			return writeHistory(o.out, l, time.Now())
		},
	}
}

// writeHistory prints the lock's history, one section per slot for a lock of several slots.
func writeHistory(w io.Writer, l *lockv1.DistributedLock, now time.Time) error {
	n := slotCount(l)
	if n == 1 {
		if len(l.Status.History) == 0 {
			fmt.Fprintf(w, "lock %s/%s has no terms yet (phase %s).\n", l.Namespace, l.Name, orDash(string(l.Status.Phase)))
			return nil
		}
		return printTable(w, historyTable(l.Status.History, now))
	}
	fmt.Fprintf(w, "lock %s/%s: %d slots, each with terms of its own\n", l.Namespace, l.Name, l.Spec.EffectiveSlots())
	for slot := range n {
		v := l.Status.SlotView(slot)
		fmt.Fprintf(w, "\nslot %d%s:", slot, removedNote(l, slot))
		if len(v.History) == 0 {
			fmt.Fprintf(w, " no terms yet (phase %s).\n", orDash(string(v.Phase)))
			continue
		}
		fmt.Fprintln(w)
		if err := printTable(w, historyTable(v.History, now)); err != nil {
			return err
		}
	}
	return nil
}

// historyTable is history's table, in status order (newest first).
func historyTable(terms []lockv1.Term, now time.Time) [][]string {
	rows := [][]string{{"TOKEN", "HOLDER", "STARTED", "ENDED", "LASTED", "REASON"}}
	for _, t := range terms {
		ended, lasted := "(open)", duration.HumanDuration(now.Sub(t.Acquired.Time))+" so far"
		if t.Ended != nil {
			ended = utc(t.Ended.Time)
			lasted = duration.HumanDuration(t.Ended.Sub(t.Acquired.Time))
		}
		rows = append(rows, []string{strconv.FormatInt(t.Token, 10), t.Holder, utc(t.Acquired.Time), ended, lasted, termReason(t)})
	}
	return rows
}

// termReason is the term's reason, with the operator's own words when an operator ended it.
func termReason(t lockv1.Term) string {
	if t.Reason == lockv1.ReasonOperatorRelease && t.Message != "" {
		return t.Reason + ": " + t.Message
	}
	return orDash(t.Reason)
}

func utc(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
