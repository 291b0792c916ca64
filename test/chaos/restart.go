package chaos

import (
	"fmt"
	"time"
)

// Restart is one crash of the holder's worker that the kubelet answered with a restart under
// the same pod UID, as the harness made it: the ground truth behind "a restart never keeps a
// token" (controllers/restart.go).
type Restart struct {
	UID   string `json:"uid"`
	Pod   string `json:"pod"`
	Slot  int32  `json:"slot,omitempty"` // the lock slot of that term (0 for a one-slot lock): CheckRestarts reads that slot's observations
	Token int64  `json:"token"`          // the published token of the pod's term when its worker was killed
	// Proof: the pod's shape proves the old process gone (one regular container, its own
	// PID namespace, no native sidecar), so the same pod may get a new term at once.
	Proof bool  `json:"proof"`
	Crash int64 `json:"crash"` // when the old process exited (CLOCK_MONOTONIC ns)
	// Ready is when the kubelet first reported the restarted worker Ready, 0 if it never did.
	Ready int64 `json:"ready,omitempty"`
	// Abandoned: the restarted process read the old term, was refused at the fence (the old
	// process presented the token first) and abandoned it, so that it was not Ready while the
	// lock named it with that token: the slow path is then the right one.
	Abandoned bool `json:"abandoned,omitempty"`
}

// RestartRule is what the end of a restarted holder's term must respect.
type RestartRule struct {
	// Wait and Slack are the handoff rule's: a term whose holder may still run ends only after
	// a Releasing phase of Wait (the harness's watch sees it up to Slack late).
	Wait, Slack time.Duration
	// React bounds how long the controller may take to act on what it sees (the crash, the
	// restart, the end of the wait).
	React time.Duration
}

// CheckRestarts checks every restart against the lock's observed statuses (resourceVersion
// order):
//
//   - the term of the crashed token ends, within React of the later of the crash and the
//     restarted worker's readiness, plus Wait: a restart never keeps a token;
//   - it never returns to Held from a Releasing phase seen after the crash;
//   - without proof (a pod with a native sidecar) the term ends only after Releasing for
//     Wait: no grant before the full lock delay, to another pod or to the same one;
//   - with proof, unless the restarted process abandoned the token or became Ready only late
//     in the Releasing phase, the next grant goes to the same pod with a new token.
func CheckRestarts(obs []StatusObs, rs []Restart, rule RestartRule) []Violation {
	var vs []Violation
	for _, r := range rs {
		if r.Token != 0 {
			vs = append(vs, checkRestart(obs, r, rule)...)
		}
	}
	return vs
}

func checkRestart(obs []StatusObs, r Restart, rule RestartRule) []Violation {
	bad := func(format string, args ...any) []Violation {
		head := fmt.Sprintf("restart of %s (%s) holding token %d: ", r.Pod, r.UID, r.Token)
		return []Violation{{Checker: "restart", Detail: head + fmt.Sprintf(format, args...)}}
	}
	ours := func(o StatusObs) bool {
		return o.HolderUID == r.UID && o.Token == r.Token && (o.Phase == "Held" || o.Phase == "Releasing")
	}
	var releasing, releasingSinceCrash int64 // when Releasing was first seen since the term was last seen Held; since the crash
	published, end := false, -1
	for i, o := range obs {
		if !ours(o) {
			if published {
				end = i
				break
			}
			continue
		}
		published = true
		switch o.Phase {
		case "Held":
			if releasingSinceCrash != 0 {
				return bad("Held again at rv %d after Releasing (seen %v after the crash): the restarted pod got the old token back", o.RV, since(r.Crash, releasingSinceCrash))
			}
			releasing = 0
		case "Releasing":
			if releasing == 0 {
				releasing = o.Mono
			}
			if o.Mono >= r.Crash && releasingSinceCrash == 0 {
				releasingSinceCrash = o.Mono
			}
		}
	}
	switch {
	case !published:
		return nil // the harness read a token that was never observed published
	case end >= 0 && obs[end].Mono < r.Crash:
		return nil // the term had ended before the crash
	}
	latest := max(r.Crash, r.Ready) + int64(rule.Wait+rule.React)
	if end < 0 {
		return bad("the term never ended in %d observations: the restart kept the token", len(obs))
	}
	e := obs[end]
	if e.Mono > latest {
		return bad("the term ended at rv %d, %v after the crash (bound %v after the crash or the restarted worker's readiness): the restart kept the token",
			e.RV, since(r.Crash, e.Mono), rule.Wait+rule.React)
	}
	waited := time.Duration(0)
	if releasing != 0 {
		waited = time.Duration(e.Mono - releasing)
	}
	if !r.Proof {
		if releasing == 0 || waited < rule.Wait-rule.Slack {
			return bad("no proof (native sidecar), yet the term ended at rv %d (%s, holder %q token %d) after %v of Releasing, wait %v",
				e.RV, e.Phase, e.Holder, e.Token, waited.Round(time.Millisecond), rule.Wait)
		}
		return nil
	}
	if r.Abandoned || r.Ready == 0 || (releasing != 0 && r.Ready > releasing+int64(rule.Wait/2)) {
		return nil // the slow path: the restarted worker was not Ready while the term could still go to it
	}
	for _, o := range obs[end:] {
		if o.HolderUID == "" || o.Token == 0 || o.Phase != "Held" {
			continue
		}
		if o.HolderUID != r.UID || o.Token <= r.Token {
			return bad("proof (one container), restarted worker Ready %v after the crash, yet the next grant at rv %d went to %s (%s) with token %d, not to the same pod with a new token",
				since(r.Crash, r.Ready), o.RV, o.Holder, o.HolderUID, o.Token)
		}
		return nil
	}
	return nil // no grant observed after the end: liveness is CheckLiveness's
}

// since is the time from a to b, rounded for messages.
func since(a, b int64) time.Duration { return time.Duration(b - a).Round(time.Millisecond) }
