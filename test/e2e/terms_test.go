//go:build e2e

package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// term is one grant of the lock as the recording saw it.
type term struct {
	Holder    string
	UID       string
	Token     int64
	GrantedAt time.Time // first observation of the token Held
	// ReleasingAt is the first observation of phase Releasing in this term (zero if never).
	ReleasingAt time.Time
	// EndedAt is the first observation showing another token or no holder (zero: not ended).
	EndedAt time.Time
	// Reason is why the term ended, from status.history (empty while it runs).
	Reason string
}

func (tm term) String() string {
	s := fmt.Sprintf("token %d to %s", tm.Token, tm.Holder)
	if !tm.ReleasingAt.IsZero() {
		s += ", went Releasing"
	}
	if tm.Reason != "" {
		s += ", ended " + tm.Reason
	}
	return s
}

// terms reconstructs the lock's terms from its recorded versions, in order.
func terms(locks []lockObs) []term {
	var ts []term
	cur := -1
	for _, o := range locks {
		st := o.Lock.Status
		for i := range ts { // fill in reasons as history reports them
			if ts[i].Reason != "" {
				continue
			}
			for _, h := range st.History {
				if h.Token == ts[i].Token && h.Ended != nil {
					ts[i].Reason = h.Reason
				}
			}
		}
		switch {
		case cur >= 0 && st.FencingToken == ts[cur].Token && string(st.HolderUID) == ts[cur].UID:
			if st.Phase == lockv1.PhaseReleasing && ts[cur].ReleasingAt.IsZero() {
				ts[cur].ReleasingAt = o.At
			}
			continue
		case cur >= 0 && ts[cur].EndedAt.IsZero():
			ts[cur].EndedAt = o.At
		}
		if st.HolderUID != "" && st.FencingToken != 0 && (st.Phase == lockv1.PhaseHeld || st.Phase == lockv1.PhaseReleasing) {
			ts = append(ts, term{Holder: st.Holder, UID: string(st.HolderUID), Token: st.FencingToken, GrantedAt: o.At})
			cur = len(ts) - 1
			if st.Phase == lockv1.PhaseReleasing {
				ts[cur].ReleasingAt = o.At
			}
		}
	}
	return ts
}

// statusObs converts the recording for the chaos suite's token checker.
func statusObs(locks []lockObs) []chaos.StatusObs {
	var out []chaos.StatusObs
	for _, o := range locks {
		rv, _ := strconv.ParseUint(o.Lock.ResourceVersion, 10, 64)
		st := o.Lock.Status
		out = append(out, chaos.StatusObs{RV: rv, Phase: string(st.Phase), Holder: st.Holder, HolderUID: string(st.HolderUID),
			Token: st.FencingToken, MaxToken: st.MaxFencingToken, Epoch: st.ControllerEpoch, Mono: o.At.UnixNano()})
	}
	return out
}

// checkNotAttested checks a term that must end through Releasing and the lock delay: it was
// not ended as attested, it went through Releasing, and the next term (if any) began at
// least the lock delay after Releasing was published (less slack for the two watch
// deliveries: both observations are this process's receive times).
func checkNotAttested(tm term, next *term, slack time.Duration) []string {
	var bad []string
	if tm.Reason == lockv1.ReasonHolderTerminated {
		bad = append(bad, fmt.Sprintf("term %v ended as attested (%s): the kubelet's state did not prove the holder stopped", tm, tm.Reason))
	}
	if tm.ReleasingAt.IsZero() {
		bad = append(bad, fmt.Sprintf("term %v ended without Releasing", tm))
		return bad
	}
	if next != nil && next.UID != tm.UID {
		if gap := next.GrantedAt.Sub(tm.ReleasingAt); gap < lockDelay-slack {
			bad = append(bad, fmt.Sprintf("next term %v granted %v after Releasing of %v, want at least the lock delay %v", next, gap.Round(time.Millisecond), tm, lockDelay))
		}
	}
	return bad
}

// summary lists terms, one per line.
func summary(ts []term) string {
	var b strings.Builder
	for _, tm := range ts {
		b.WriteString("  " + tm.String() + "\n")
	}
	return b.String()
}
