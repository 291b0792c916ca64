package main

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

func newGetCommand(o *options) *cobra.Command {
	c := &cobra.Command{
		Use:   "get [NAME]",
		Short: "List locks: holder, token, phase, time left in a Releasing wait",
		Long: `get lists the DistributedLocks of the namespace (all namespaces with -A), or one lock.

WAIT-LEFT is shown while a term is Releasing: max(lockDelaySeconds, termLeaseSeconds) minus
the time since the Held condition turned False, by this machine's clock. It is an estimate
from status: the controller counts the wait from the acknowledgement of its Releasing write
on its own clock (and a controller that takes over starts a full wait again), so it waits at
least this long, possibly longer. "due" means the estimate has run out. Proof that the holder
stopped ends the wait at once: its own confirmation (` + lockv1.AnnotationHolderRelease + `) or
its attested termination (every container reported terminated).

A lock with more than one slot (spec.slots) shows one row per slot, NAME[i] for slot i, each
with that slot's holder, token, phase and wait.`,
		Example: `  kubectl dlock get
  kubectl dlock get -A
  kubectl dlock get payments-leader -n shop`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 1 {
				return usagef("get takes at most one NAME, got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 1 && o.allNamespaces {
				return usagef("a NAME and --all-namespaces cannot be combined")
			}
			s, err := o.connect()
			if err != nil {
				return err
			}
			var locks []lockv1.DistributedLock
			if len(args) == 1 {
				l, err := s.getLock(c.Context(), args[0])
				if err != nil {
					return err
				}
				locks = []lockv1.DistributedLock{*l}
			} else if locks, err = s.listLocks(c.Context()); err != nil {
				return err
			}
			if len(locks) == 0 {
				where := "namespace " + s.namespace
				if s.all {
					where = "any namespace"
				}
				fmt.Fprintf(o.errOut, "No DistributedLocks found in %s.\n", where)
				return nil
			}
			return printTable(o.out, lockTable(locks, time.Now(), s.all))
		},
	}
	c.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "list the locks of every namespace")
	return c
}

// lockTable is get's table, sorted by namespace and name.
func lockTable(locks []lockv1.DistributedLock, now time.Time, withNamespace bool) [][]string {
	sorted := append([]lockv1.DistributedLock(nil), locks...)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].Namespace != sorted[j].Namespace {
			return sorted[i].Namespace < sorted[j].Namespace
		}
		return sorted[i].Name < sorted[j].Name
	})
	head := []string{"NAME", "HOLDER", "TOKEN", "PHASE", "WAIT-LEFT", "AGE"}
	if withNamespace {
		head = append([]string{"NAMESPACE"}, head...)
	}
	rows := [][]string{head}
	for i := range sorted {
		l := &sorted[i]
		n := slotCount(l)
		for slot := range n {
			name, sl := l.Name, l
			if n > 1 {
				name, sl = fmt.Sprintf("%s[%d]", l.Name, slot), slotLock(l, slot)
			}
			st := &sl.Status
			row := []string{name, holderText(l, st), tokenText(st.FencingToken), orDash(string(st.Phase)), waitLeft(sl, now), age(l.CreationTimestamp.Time, now)}
			if withNamespace {
				row = append([]string{l.Namespace}, row...)
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// releaseWait is max(lockDelaySeconds, termLeaseSeconds): the wait of a Releasing term.
func releaseWait(l *lockv1.DistributedLock) time.Duration {
	return time.Duration(max(l.Spec.EffectiveLockDelaySeconds(), l.Status.TermLeaseSeconds)) * time.Second
}

// waitLeft estimates the time left in a Releasing wait from status (see get --help), or "-".
func waitLeft(l *lockv1.DistributedLock, now time.Time) string {
	if l.Status.Phase != lockv1.PhaseReleasing {
		return "-"
	}
	held := meta.FindStatusCondition(l.Status.Conditions, lockv1.ConditionHeld)
	if held == nil || held.Status == "True" || held.LastTransitionTime.IsZero() {
		return "?"
	}
	left := releaseWait(l) - now.Sub(held.LastTransitionTime.Time)
	if left <= 0 {
		return "due"
	}
	return duration.HumanDuration(left.Round(time.Second))
}

func age(t, now time.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t))
}

func tokenText(tok int64) string {
	if tok == 0 {
		return "-"
	}
	return strconv.FormatInt(tok, 10)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printTable writes rows as kubectl does: columns padded with three spaces.
func printTable(w io.Writer, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	for _, r := range rows {
		for i, cell := range r {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, cell)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}
