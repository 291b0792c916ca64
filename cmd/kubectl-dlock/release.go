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
	var reason, prefer, holder string
	var slot int32
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

A lock with more than one slot (spec.slots) has a term per slot: name the one to end with
--slot I or --holder POD (the slot POD holds); the request names that slot's token, which no
other slot's term has. --holder on a one-slot lock refuses unless POD is its holder.

It refuses (exit code 3) when the lock (or the slot) has no holder, its term is already
Releasing, or --holder names a pod that holds none of its slots.
It needs patch on distributedlocks.lockwarden.io.`,
		Example: `  kubectl dlock release payments-leader -n shop --reason "move the leader off node-3"
  kubectl dlock release reports-leader --reason "drain node-3" --prefer reports-1
  kubectl dlock release workers --slot 2 --reason "node-3 is draining"`,
		Args: exactArgs(1, "one NAME"),
		RunE: func(c *cobra.Command, args []string) error {
			if strings.TrimSpace(reason) == "" {
				return usagef("--reason is required: say why the term ends (it is recorded in the lock's history)")
			}
			if slot < -1 || slot >= lockv1.MaxSlots {
				return usagef("--slot %d: a slot is 0 to %d", slot, lockv1.MaxSlots-1)
			}
			s, err := o.connect()
			if err != nil {
				return err
			}
			target := releaseTarget{slot: slot, holder: strings.TrimSpace(holder)}
			return s.release(c.Context(), o.out, args[0], target, strings.TrimSpace(reason), strings.TrimSpace(prefer))
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why the term ends (required; recorded in status.history and the Event)")
	c.Flags().Int32Var(&slot, "slot", -1, "a lock with more than one slot: the slot whose term ends (0 to spec.slots - 1)")
	c.Flags().StringVar(&holder, "holder", "", "the pod whose term ends: on a lock with more than one slot, the slot it holds")
	c.Flags().StringVar(&prefer, "prefer", "", "strategy Preferred only: set spec.preferredHolder to this pod in the same request, so the lock does not return to the released holder")
	return c
}

// releaseTarget is the term release was asked to end: a slot (-1: not named) or a holder
// ("": not named).
type releaseTarget struct {
	slot   int32
	holder string
}

// targetSlot is the slot whose term target names in the lock as read: slot 0 of a one-slot
// lock unless a flag names another; one of several slots must be named.
func targetSlot(l *lockv1.DistributedLock, target releaseTarget) (int32, error) {
	key := l.Namespace + "/" + l.Name
	n := slotCount(l)
	if target.slot >= n {
		if n == 1 {
			return 0, usagef("--slot %d: lock %s has one slot (slot 0)", target.slot, key)
		}
		return 0, usagef("--slot %d: lock %s has slots 0 to %d", target.slot, key, n-1)
	}
	if target.holder == "" {
		if target.slot >= 0 {
			return target.slot, nil
		}
		if n == 1 {
			return 0, nil
		}
		return 0, usagef("lock %s has %d slots: name the term to end with --slot I or --holder POD (%s)", key, n, slotHolders(l))
	}
	for slot := range n {
		if v := l.Status.SlotView(slot); v.Holder == target.holder && v.HolderUID != "" {
			if target.slot >= 0 && target.slot != slot {
				return 0, fmt.Errorf("release %s: %w: --holder %s holds slot %d, not --slot %d", key, ErrRefused, target.holder, slot, target.slot)
			}
			return slot, nil
		}
	}
	if n == 1 {
		return 0, fmt.Errorf("release %s: %w: --holder %s is not the lock's holder (%s)", key, ErrRefused, target.holder, slotHolders(l))
	}
	return 0, fmt.Errorf("release %s: %w: --holder %s holds none of its slots (%s)", key, ErrRefused, target.holder, slotHolders(l))
}

// slotHolders lists each slot's holder and token, for an error that asks to name one.
func slotHolders(l *lockv1.DistributedLock) string {
	var held []string
	for slot := range slotCount(l) {
		if v := l.Status.SlotView(slot); v.HolderUID != "" {
			held = append(held, fmt.Sprintf("slot %d: %s, token %d", slot, v.Holder, v.FencingToken))
		}
	}
	if len(held) == 0 {
		return "no slot has a holder"
	}
	return strings.Join(held, "; ")
}

// pendingRequest is the slot other than slot whose term, still Held, the release request
// annotation names (the annotation names one token, so a new request replaces it), or -1.
func pendingRequest(l *lockv1.DistributedLock, slot int32) int32 {
	req := l.Annotations[lockv1.AnnotationReleaseRequest]
	for i := range slotCount(l) {
		if v := l.Status.SlotView(i); i != slot && v.Phase == lockv1.PhaseHeld && v.FencingToken != 0 && req == strconv.FormatInt(v.FencingToken, 10) {
			return i
		}
	}
	return -1
}

// releasePlan is what release asks of the controller.
type releasePlan struct {
	slot  int32
	slots bool // the lock has more than one slot
	// replaces is the slot whose Held term the annotation names now (a request the
	// controller has not acted on, which this one replaces), or -1.
	replaces int32
	token    int64
	holder   string
	wait     int32 // seconds: max(lockDelaySeconds, termLeaseSeconds)
	already  bool  // the same request is on the lock already
	// returns: strategy Preferred and the holder is spec.preferredHolder, which the lock
	// goes back to (preemption) unless prefer names another pod.
	returns bool
	prefer  string // the new spec.preferredHolder, or ""
}

// planRelease decides whether a release of a one-slot lock's term (or slot 0's) may be
// requested for the lock as read, with prefer the pod to make spec.preferredHolder ("" for
// none).
func planRelease(l *lockv1.DistributedLock, prefer string) (releasePlan, error) {
	return planSlotRelease(l, 0, prefer)
}

// planSlotRelease is planRelease for the term of the given slot.
func planSlotRelease(l *lockv1.DistributedLock, slot int32, prefer string) (releasePlan, error) {
	lockKey, subject, slots := l.Namespace+"/"+l.Name, "the lock", slotCount(l) > 1
	key, replaces := lockKey, pendingRequest(l, slot)
	if slots {
		key, subject = fmt.Sprintf("%s slot %d", key, slot), fmt.Sprintf("slot %d", slot)
		l = slotLock(l, slot)
	}
	st := &l.Status
	switch {
	case prefer != "" && l.Spec.Strategy != lockv1.StrategyPreferred:
		return releasePlan{}, usagef("--prefer needs strategy Preferred; lock %s has strategy %s", lockKey, orDash(string(l.Spec.Strategy)))
	case prefer != "" && prefer == st.Holder:
		return releasePlan{}, usagef("--prefer %s names the holder being released; name the pod the lock should go to", prefer)
	case st.HolderUID == "" || st.FencingToken == 0:
		return releasePlan{}, fmt.Errorf("release %s: %w: %s has no holder (phase %s): there is no term to end", key, ErrRefused, subject, orDash(string(st.Phase)))
	case st.Phase == lockv1.PhaseReleasing:
		return releasePlan{}, fmt.Errorf("release %s: %w: the term of %s (token %d) is already Releasing: see kubectl dlock get %s -n %s",
			key, ErrRefused, st.Holder, st.FencingToken, l.Name, l.Namespace)
	}
	p := releasePlan{slot: slot, slots: slots, replaces: replaces, token: st.FencingToken, holder: st.Holder, wait: int32(releaseWait(l).Seconds()), prefer: prefer}
	p.already = l.Annotations[lockv1.AnnotationReleaseRequest] == strconv.FormatInt(p.token, 10)
	p.returns = prefer == "" && l.Spec.Strategy == lockv1.StrategyPreferred && l.Spec.PreferredHolder == st.Holder
	return p, nil
}

// release sets the release annotations with the lock's resourceVersion as precondition,
// reading the lock again after a conflict.
func (s *session) release(ctx context.Context, out io.Writer, name string, target releaseTarget, reason, prefer string) error {
	for attempt := 0; ; attempt++ {
		l, err := s.getLock(ctx, name)
		if err != nil {
			return err
		}
		if l.Spec.IsGlobal() {
			return errGlobalRelease(l)
		}
		slot, err := targetSlot(l, target)
		if err != nil {
			return err
		}
		p, err := planSlotRelease(l, slot, prefer)
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
	term, subject := p.holder, "the lock"
	if p.slots {
		term, subject = fmt.Sprintf("%s in slot %d", p.holder, p.slot), fmt.Sprintf("slot %d", p.slot)
	}
	fmt.Fprintf(w, "lock %s/%s: release of the term of %s (token %d) %s, reason %q.\n", l.Namespace, l.Name, term, p.token, verb, reason)
	if p.replaces >= 0 {
		fmt.Fprintf(w, "It replaces the request to release slot %d, which the controller had not acted on: release slot %d again once slot %d is Releasing.\n",
			p.replaces, p.replaces, p.slot)
	}
	fmt.Fprintf(w, "The controller moves %s to Releasing (%s must stop) and waits the full lock delay of %d s from that write before it grants the next eligible candidate;\n", subject, p.holder, p.wait)
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
