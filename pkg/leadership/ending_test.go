package leadership_test

import (
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestEnding: Ending(token) follows the newest observation: true, with the reason the
// controller recorded on the open term, while the lock shows this pod's term of token
// Releasing; false for a Held term, another token, another holder or a closed history entry.
func TestEnding(t *testing.T) {
	h := newHarness(t, 10)
	const uid = types.UID("uid-ending")
	el := h.run(t, h.config("worker-0", uid))
	term := func(token int64, reason string, ended bool) func(*lockv1.DistributedLockStatus) {
		return func(s *lockv1.DistributedLockStatus) {
			e := lockv1.Term{Holder: s.Holder, HolderUID: s.HolderUID, Token: token, Acquired: metav1.Now(), Reason: reason}
			if ended {
				now := metav1.Now()
				e.Ended = &now
			}
			s.History = append([]lockv1.Term{e}, s.History...)
		}
	}
	check := func(token int64, wantReason string, wantOK bool) {
		t.Helper()
		eventually(t, 10*time.Second, func() bool { r, ok := el.Ending(token); return r == wantReason && ok == wantOK },
			func() string {
				r, ok := el.Ending(token)
				return fmt.Sprintf("Ending(%d) = %q, %v; want %q, %v", token, r, ok, wantReason, wantOK)
			})
	}

	setStatus(t, h.key, func(s *lockv1.DistributedLockStatus) {
		held("worker-0", uid, 5, 10)(s)
		term(5, lockv1.ReasonGranted, false)(s)
	})
	h.rec.waitEvents(t, "holder(worker-0,5) start(5)")
	check(5, "", false) // Held: not ending

	setStatus(t, h.key, func(s *lockv1.DistributedLockStatus) {
		releasing(s)
		s.History[0].Reason = lockv1.ReasonHolderTerminating
	})
	check(5, lockv1.ReasonHolderTerminating, true)
	if r, ok := el.Ending(6); ok {
		t.Errorf("Ending(6) = %q, true while the lock shows token 5 Releasing; want false", r)
	}

	// Another pod's Releasing term is not this pod's.
	setStatus(t, h.key, func(s *lockv1.DistributedLockStatus) {
		held("worker-1", "uid-other", 7, 10)(s)
		term(7, lockv1.ReasonGranted, false)(s)
		releasing(s)
		s.History[0].Reason = lockv1.ReasonHolderTerminating
	})
	check(5, "", false)
	check(7, "", false)

	// This pod's Releasing term without an open entry of its token: ending, no reason.
	setStatus(t, h.key, func(s *lockv1.DistributedLockStatus) {
		held("worker-0", uid, 9, 10)(s)
		term(9, lockv1.ReasonHolderTerminating, true)(s)
		releasing(s)
	})
	check(9, "", true)
}
