package chaos

import (
	"fmt"
	"time"
)

// Life is one process that played a pod (by UID), as the harness that started it knows it:
// the ground truth the controller can only infer from what the kubelet writes.
type Life struct {
	UID   string `json:"uid"`
	Start int64  `json:"start"`          // CLOCK_MONOTONIC ns, when it was started
	Exit  int64  `json:"exit,omitempty"` // when it exited; 0 while still running
}

// aliveAtOrAfter reports whether the process ran at m or was started after m.
func (l Life) aliveAtOrAfter(m int64) bool {
	return l.Exit == 0 || l.Exit > m
}

// term is the published term CheckHandoffs follows.
type term struct {
	uid, holder string
	token       int64
	// releasing is when Releasing was first observed since the term was last seen Held;
	// 0 while the newest observation of the term is Held.
	releasing int64
}

// HandoffRule is what a term's end without attestation must respect.
type HandoffRule struct {
	// Wait is the shortest Releasing phase that ends a term whose holder may still run:
	// max(lockDelaySeconds, termLeaseSeconds).
	Wait time.Duration
	// Slack absorbs the delay between the controller's acknowledged Releasing write and the
	// harness's observation of it.
	Slack time.Duration
}

// CheckHandoffs checks every end of a published term (in the status observations, in
// resourceVersion order) against the processes that really played the holder: a term that
// ended without a Releasing phase of at least rule.Wait - rule.Slack since it was last seen
// Held was ended on the controller's claim of attested termination, so no process of the
// holder's UID may run at that moment, nor be started later (a container restart under the
// same UID). A violation is the controller taking something that is not proof (a crash
// awaiting restart, a running sidecar, PodGC's Failed, a late status write) as proof.
func CheckHandoffs(obs []StatusObs, lives []Life, rule HandoffRule) []Violation {
	byUID := map[string][]Life{}
	for _, l := range lives {
		byUID[l.UID] = append(byUID[l.UID], l)
	}
	var vs []Violation
	var cur *term
	for _, o := range obs {
		holding := o.HolderUID != "" && o.Token != 0 && (o.Phase == "Held" || o.Phase == "Releasing")
		if cur != nil && (!holding || o.HolderUID != cur.uid || o.Token != cur.token) {
			// A new token for the same pod (DESIGN: a vanished key whose holder is still
			// eligible is granted again at once) hands the lock to nobody else.
			if !holding || o.HolderUID != cur.uid {
				vs = append(vs, judgeEnd(*cur, o, byUID[cur.uid], rule)...)
			}
			cur = nil
		}
		if !holding {
			continue
		}
		if cur == nil {
			cur = &term{uid: o.HolderUID, holder: o.Holder, token: o.Token}
		}
		switch o.Phase {
		case "Held":
			cur.releasing = 0
		case "Releasing":
			if cur.releasing == 0 {
				cur.releasing = o.Mono
			}
		}
	}
	return vs
}

// judgeEnd checks one term's end, observed in end.
func judgeEnd(t term, end StatusObs, lives []Life, rule HandoffRule) []Violation {
	waited := time.Duration(0)
	if t.releasing != 0 {
		waited = time.Duration(end.Mono - t.releasing)
	}
	if t.releasing != 0 && waited >= rule.Wait-rule.Slack {
		return nil // the slow path: the holder may have been running, the delay covers it
	}
	for _, l := range lives {
		if !l.aliveAtOrAfter(end.Mono) {
			continue
		}
		how := "without Releasing since it was last Held"
		if t.releasing != 0 {
			how = fmt.Sprintf("after only %v of Releasing (wait %v)", waited.Round(time.Millisecond), rule.Wait)
		}
		state := "was still running"
		switch {
		case l.Start > end.Mono:
			state = fmt.Sprintf("was started again %v later under the same UID", time.Duration(l.Start-end.Mono).Round(time.Millisecond))
		case l.Exit != 0:
			state = fmt.Sprintf("was still running (it exited %v later)", time.Duration(l.Exit-end.Mono).Round(time.Millisecond))
		}
		return []Violation{{Checker: "handoff", Detail: fmt.Sprintf(
			"term of %s (%s) token %d ended at rv %d %s, taken as attested, but a process of that pod %s",
			t.holder, t.uid, t.token, end.RV, how, state)}}
	}
	return nil
}

// CheckOverlaps reports every measured overlap of two pods' leadership longer than
// tolerance: with the controller's waits, a holder has stopped (by its own deadline) before
// the next one starts.
func CheckOverlaps(overlaps []Overlap, tolerance time.Duration) []Violation {
	var vs []Violation
	for _, o := range overlaps {
		if o.Duration > tolerance {
			vs = append(vs, Violation{Checker: "overlap", Detail: fmt.Sprintf("%s (%s, token %d) and %s (%s, token %d) both led for %v (tolerance %v)",
				o.A.Pod, o.A.UID, o.A.Token, o.B.Pod, o.B.UID, o.B.Token, o.Duration.Round(time.Millisecond), tolerance)})
		}
	}
	return vs
}
