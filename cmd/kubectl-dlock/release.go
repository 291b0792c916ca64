package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

func newReleaseCommand(o *options) *cobra.Command {
	var reason, prefer string
	c := &cobra.Command{
		Use:   "release NAME --reason TEXT",
		Short: "End the current term on an operator's request (Releasing, then the full lock delay)",
		Long: `release asks the controller to end the current term of a lock: it sets the annotations
` + lockv1.AnnotationReleaseRequest + `=<the current token> and ` + lockv1.AnnotationReleaseReason + `=TEXT.
The controller then moves the lock to Releasing (the holder must stop), waits the full lock
delay, max(lockDelaySeconds, termLeaseSeconds), counted from its Releasing write, and grants
the next eligible candidate; it records the reason in status.history and emits an Event. An
operator's request never shortens the wait; only proof that the holder stopped does: its own
confirmation (` + lockv1.AnnotationHolderRelease + `) or its attested termination (every container
reported terminated). The token is read from status; the patch carries the lock's
resourceVersion, so a term that changed in between is read again, never released by mistake.

With strategy Preferred, releasing the preferred holder does not keep the lock away from
it: once the next holder is granted, the controller preempts it as soon as the preferred pod
has been eligible for the lock delay, and the lock goes back. --prefer POD sets
spec.preferredHolder to POD in the same request, which keeps the lock away from the old
holder until spec.preferredHolder is set back (or the strategy changed).

It refuses (exit code 3) when the lock has no holder or its term is already Releasing.
It needs patch on distributedlocks.lockwarden.io.`,
		Example: `  kubectl dlock release payments-leader -n shop --reason "move the leader off node-3"
  kubectl dlock release reports-leader --reason "drain node-3" --prefer reports-1`,
		Args: exactArgs(1, "one NAME"),
		RunE: func(c *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usagef("--reason is required: say why the term ends (it is recorded in the lock's history)")
			}
			s, err := o.connect()
			if err != nil {
				return err
			}
			return s.release(c.Context(), o.out, args[0], strings.TrimSpace(reason), strings.TrimSpace(prefer))
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why the term ends (required; recorded in status.history and the Event)")
	c.Flags().StringVar(&prefer, "prefer", "", "strategy Preferred only: set spec.preferredHolder to this pod in the same request, so the lock does not return to the released holder")
	return c
}

// releasePlan is what release asks of the controller.
type releasePlan struct {
	token   int64
	holder  string
	wait    int32 // seconds: max(lockDelaySeconds, termLeaseSeconds)
	already bool  // the same request is on the lock already
	// returns: strategy Preferred and the holder is spec.preferredHolder, which the lock
	// goes back to (preemption) unless prefer names another pod.
	returns bool
	prefer  string // the new spec.preferredHolder, or ""
}

// planRelease decides whether a release may be requested for the lock as read, with prefer
// the pod to make spec.preferredHolder ("" for none).
func planRelease(l *lockv1.DistributedLock, prefer string) (releasePlan, error) {
	st := &l.Status
	key := l.Namespace + "/" + l.Name
	switch {
	case prefer != "" && l.Spec.Strategy != lockv1.StrategyPreferred:
		return releasePlan{}, usagef("--prefer needs strategy Preferred; lock %s has strategy %s", key, orDash(string(l.Spec.Strategy)))
	case prefer != "" && prefer == st.Holder:
		return releasePlan{}, usagef("--prefer %s names the holder being released; name the pod the lock should go to", prefer)
	case st.HolderUID == "" || st.FencingToken == 0:
		return releasePlan{}, fmt.Errorf("release %s: %w: the lock has no holder (phase %s): there is no term to end", key, ErrRefused, orDash(string(st.Phase)))
	case st.Phase == lockv1.PhaseReleasing:
		return releasePlan{}, fmt.Errorf("release %s: %w: the term of %s (token %d) is already Releasing: see kubectl dlock get %s -n %s",
			key, ErrRefused, st.Holder, st.FencingToken, l.Name, l.Namespace)
	}
	p := releasePlan{token: st.FencingToken, holder: st.Holder, wait: int32(releaseWait(l).Seconds()), prefer: prefer}
	p.already = l.Annotations[lockv1.AnnotationReleaseRequest] == strconv.FormatInt(p.token, 10)
	p.returns = prefer == "" && l.Spec.Strategy == lockv1.StrategyPreferred && l.Spec.PreferredHolder == st.Holder
	return p, nil
}

// release sets the release annotations with the lock's resourceVersion as precondition,
// reading the lock again after a conflict.
func (s *session) release(ctx context.Context, out io.Writer, name, reason, prefer string) error {
	for attempt := 0; ; attempt++ {
		l, err := s.getLock(ctx, name)
		if err != nil {
			return err
		}
		p, err := planRelease(l, prefer)
		if err != nil {
			return err
		}
		orig := l.DeepCopy()
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[lockv1.AnnotationReleaseRequest] = strconv.FormatInt(p.token, 10)
		l.Annotations[lockv1.AnnotationReleaseReason] = reason
		if p.prefer != "" {
			l.Spec.PreferredHolder = p.prefer
		}
		err = s.c.Patch(ctx, l, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err != nil {
			return fmt.Errorf("annotate lock %s/%s: %w", l.Namespace, name, explainAPIError(err, l.Namespace))
		}
		writeReleasePlan(out, l, p, reason)
		return nil
	}
}

func writeReleasePlan(w io.Writer, l *lockv1.DistributedLock, p releasePlan, reason string) {
	verb := "requested"
	if p.already {
		verb = "requested again (the same token was requested before)"
	}
	fmt.Fprintf(w, "lock %s/%s: release of the term of %s (token %d) %s, reason %q.\n", l.Namespace, l.Name, p.holder, p.token, verb, reason)
	fmt.Fprintf(w, "The controller moves the lock to Releasing (%s must stop) and waits the full lock delay of %d s from that write before it grants the next eligible candidate;\n", p.holder, p.wait)
	fmt.Fprintf(w, "only proof that %s stopped (its own %s, or every container reported terminated) ends the wait sooner.\n", p.holder, lockv1.AnnotationHolderRelease)
	switch {
	case p.prefer != "":
		fmt.Fprintf(w, "spec.preferredHolder is now %s: the lock does not return to %s while it stays so (set it back to return it).\n", p.prefer, p.holder)
	case p.returns:
		fmt.Fprintf(w, "Note: strategy Preferred and %s is spec.preferredHolder: once the next holder is granted, the controller preempts it as soon as %s has been eligible for the lock delay (%d s), and the lock returns to %s.\n",
			p.holder, p.holder, l.Spec.EffectiveLockDelaySeconds(), p.holder)
		fmt.Fprintf(w, "To keep it away from %s, release with --prefer POD, or set spec.preferredHolder to another pod.\n", p.holder)
	}
	fmt.Fprintf(w, "Follow it with: kubectl dlock get %s -n %s\n", l.Name, l.Namespace)
}
