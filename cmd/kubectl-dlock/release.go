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
	var reason string
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

It refuses (exit code 3) when the lock has no holder or its term is already Releasing.
It needs patch on distributedlocks.lockwarden.io.`,
		Example: `  kubectl dlock release payments-leader -n shop --reason "move the leader off node-3"`,
		Args:    exactArgs(1, "one NAME"),
		RunE: func(c *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usagef("--reason is required: say why the term ends (it is recorded in the lock's history)")
			}
			s, err := o.connect()
			if err != nil {
				return err
			}
			return s.release(c.Context(), o.out, args[0], strings.TrimSpace(reason))
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why the term ends (required; recorded in status.history and the Event)")
	return c
}

// releasePlan is what release asks of the controller.
type releasePlan struct {
	token   int64
	holder  string
	wait    int32 // seconds: max(lockDelaySeconds, termLeaseSeconds)
	already bool  // the same request is on the lock already
}

// planRelease decides whether a release may be requested for the lock as read.
func planRelease(l *lockv1.DistributedLock) (releasePlan, error) {
	st := &l.Status
	key := l.Namespace + "/" + l.Name
	switch {
	case st.HolderUID == "" || st.FencingToken == 0:
		return releasePlan{}, fmt.Errorf("release %s: %w: the lock has no holder (phase %s): there is no term to end", key, ErrRefused, orDash(string(st.Phase)))
	case st.Phase == lockv1.PhaseReleasing:
		return releasePlan{}, fmt.Errorf("release %s: %w: the term of %s (token %d) is already Releasing: see kubectl dlock get %s -n %s",
			key, ErrRefused, st.Holder, st.FencingToken, l.Name, l.Namespace)
	}
	p := releasePlan{token: st.FencingToken, holder: st.Holder, wait: int32(releaseWait(l).Seconds())}
	p.already = l.Annotations[lockv1.AnnotationReleaseRequest] == strconv.FormatInt(p.token, 10)
	return p, nil
}

// release sets the release annotations with the lock's resourceVersion as precondition,
// reading the lock again after a conflict.
func (s *session) release(ctx context.Context, out io.Writer, name, reason string) error {
	for attempt := 0; ; attempt++ {
		l, err := s.getLock(ctx, name)
		if err != nil {
			return err
		}
		p, err := planRelease(l)
		if err != nil {
			return err
		}
		orig := l.DeepCopy()
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[lockv1.AnnotationReleaseRequest] = strconv.FormatInt(p.token, 10)
		l.Annotations[lockv1.AnnotationReleaseReason] = reason
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
	fmt.Fprintf(w, "Follow it with: kubectl dlock get %s -n %s\n", l.Name, l.Namespace)
}
