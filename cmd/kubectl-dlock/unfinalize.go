package main

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

const consequence = `Consequence: nothing ended these terms. The grants left in etcd expire with the manager's
grant lease (--etcd-lease-ttl, 60 s by default) once no manager renews it. A holder pod
leads while the lock's status names it Held: it stops at its next read after the lock is
deleted (reads come every third of the lease), and a lock that is kept goes on naming it.
Nothing fences a holder that is still running: stop those pods (or make sure they stopped)
before another leader starts.`

func newUnfinalizeCommand(o *options) *cobra.Command {
	var all, managerGone bool
	c := &cobra.Command{
		Use:   "unfinalize NAME|--all --manager-gone",
		Short: "Drop the lockwarden.io/release finalizer when the manager is gone (uninstall)",
		Long: `unfinalize removes the finalizer ` + lockv1.Finalizer + ` from a lock (or from every lock of
the namespace with --all, of every namespace with --all --all-namespaces), so that a lock,
its namespace and the CRD can be deleted after the manager was removed. A lock being deleted
disappears at once; any other lock can then be deleted without the manager.

The manager is the only one that ends a term safely (Releasing, then the lock delay); it holds
every lock with this finalizer until then. While a manager runs, delete the locks and let it
release them instead: it adds the finalizer back to every lock that is not being deleted.
The plugin cannot see the manager (it runs against etcd, not the API server), so it does
nothing unless you confirm with --manager-gone that no lockwarden manager is running.

` + consequence,
		Example: `  kubectl dlock unfinalize payments-leader -n shop --manager-gone
  kubectl dlock unfinalize --all -A --manager-gone`,
		Args: func(c *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return usagef("give NAME or --all, not both")
			case !all && len(args) != 1:
				return usagef("unfinalize takes one NAME, or --all")
			case o.allNamespaces && !all:
				return usagef("--all-namespaces goes with --all")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			if !managerGone {
				return fmt.Errorf("%w: unfinalize drops the finalizer that lets the manager end each term safely; "+
					"while the manager runs, delete the locks instead and let it release them. "+
					"If no lockwarden manager is running any more, add --manager-gone", ErrRefused)
			}
			s, err := o.connect()
			if err != nil {
				return err
			}
			var locks []lockv1.DistributedLock
			if all {
				if locks, err = s.listLocks(c.Context()); err != nil {
					return err
				}
			} else {
				l, err := s.getLock(c.Context(), args[0])
				if err != nil {
					return err
				}
				locks = []lockv1.DistributedLock{*l}
			}
			return s.unfinalize(c.Context(), o.out, locks)
		},
	}
	c.Flags().BoolVar(&all, "all", false, "every lock of the namespace (of every namespace with -A)")
	c.Flags().BoolVar(&managerGone, "manager-gone", false, "confirm that no lockwarden manager is running (required)")
	c.Flags().BoolVarP(&o.allNamespaces, "all-namespaces", "A", false, "with --all: every namespace")
	return c
}

// unfinalize drops the finalizer from each lock, with its resourceVersion as precondition
// (a conflict is read again), and says what became of each.
func (s *session) unfinalize(ctx context.Context, out io.Writer, locks []lockv1.DistributedLock) error {
	if len(locks) == 0 {
		fmt.Fprintln(out, "No DistributedLocks found: nothing to do.")
		return nil
	}
	changed := 0
	for i := range locks {
		l := &locks[i]
		did, err := s.dropFinalizer(ctx, l)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s/%s: %s\n", l.Namespace, l.Name, unfinalizeOutcome(l, did))
		if did {
			changed++
		}
	}
	if changed > 0 {
		fmt.Fprintln(out, consequence)
	}
	return nil
}

// dropFinalizer removes the finalizer from l (updating l), reporting whether it was there.
func (s *session) dropFinalizer(ctx context.Context, l *lockv1.DistributedLock) (bool, error) {
	for attempt := 0; ; attempt++ {
		if !slices.Contains(l.Finalizers, lockv1.Finalizer) {
			return false, nil
		}
		orig := l.DeepCopy()
		l.Finalizers = slices.DeleteFunc(slices.Clone(l.Finalizers), func(f string) bool { return f == lockv1.Finalizer })
		err := s.c.Patch(ctx, l, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case apierrors.IsConflict(err) && attempt < 5:
			if err := s.c.Get(ctx, client.ObjectKeyFromObject(l), l); err != nil {
				return false, fmt.Errorf("get lock %s/%s: %w", l.Namespace, l.Name, explainAPIError(err, l.Namespace))
			}
			continue
		}
		return false, fmt.Errorf("remove finalizer from %s/%s: %w", l.Namespace, l.Name, explainAPIError(err, l.Namespace))
	}
}

// unfinalizeOutcome says what dropping the finalizer did to the lock as it was read.
func unfinalizeOutcome(l *lockv1.DistributedLock, dropped bool) string {
	var s string
	switch {
	case !dropped:
		return "no " + lockv1.Finalizer + " finalizer: nothing to do"
	case l.DeletionTimestamp != nil:
		s = "finalizer removed; the lock was being deleted and is gone now"
	default:
		s = "finalizer removed; deleting the lock now takes effect at once"
	}
	switch st := &l.Status; {
	case st.HolderUID == "":
	case l.DeletionTimestamp != nil:
		s += fmt.Sprintf("; its term was not ended: %s (token %d) stops leading at its next read of the lock", st.Holder, st.FencingToken)
	default:
		s += fmt.Sprintf("; its term was not ended: %s (token %d) leads while the lock names it (delete the lock to end that)", st.Holder, st.FencingToken)
	}
	return s
}
