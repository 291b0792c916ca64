package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lockwarden/lockwarden/pkg/fence/writer"
)

// Violation is one broken property, named by its checker.
type Violation struct {
	Checker string `json:"checker"`
	Detail  string `json:"detail"`
}

func (v Violation) String() string { return v.Checker + ": " + v.Detail }

// CheckTokens checks a lock's observed statuses (in resourceVersion order): every new grant
// (holder UID and token) has a token above the previous grant's, and fencingToken,
// maxFencingToken and controllerEpoch never decrease.
func CheckTokens(obs []StatusObs) []Violation {
	var vs []Violation
	bad := func(format string, args ...any) {
		vs = append(vs, Violation{Checker: "tokens", Detail: fmt.Sprintf(format, args...)})
	}
	var prev StatusObs
	var lastGrant struct {
		uid   string
		token int64
	}
	for i, o := range obs {
		if i > 0 {
			if o.RV <= prev.RV {
				bad("resourceVersion %d after %d: observations out of order", o.RV, prev.RV)
			}
			if o.MaxToken < prev.MaxToken {
				bad("maxFencingToken went back from %d to %d at rv %d", prev.MaxToken, o.MaxToken, o.RV)
			}
			if o.Epoch < prev.Epoch {
				bad("controllerEpoch went back from %d to %d at rv %d", prev.Epoch, o.Epoch, o.RV)
			}
			if o.Token != 0 && o.Token < prev.Token {
				bad("fencingToken went back from %d to %d at rv %d", prev.Token, o.Token, o.RV)
			}
		}
		if o.Token > o.MaxToken {
			bad("fencingToken %d above maxFencingToken %d at rv %d", o.Token, o.MaxToken, o.RV)
		}
		if o.HolderUID != "" && o.Token != 0 && (o.HolderUID != lastGrant.uid || o.Token != lastGrant.token) {
			switch {
			case o.Token < lastGrant.token:
				bad("grant of token %d to %s at rv %d after a grant of token %d", o.Token, o.Holder, o.RV, lastGrant.token)
			case o.Token == lastGrant.token:
				bad("token %d granted to %s at rv %d and before to another pod (%s)", o.Token, o.HolderUID, o.RV, lastGrant.uid)
			}
			lastGrant.uid, lastGrant.token = o.HolderUID, o.Token
		}
		prev = o
	}
	return vs
}

// CheckLedger checks the ledger's own record of its decisions: no accepted token below one
// accepted before, and no token accepted from two writers.
func CheckLedger(outs []Outcome) []Violation {
	var vs []Violation
	var highest int64
	owner := map[int64]string{}
	for i, o := range outs {
		if !o.Accepted {
			continue
		}
		if o.Token < highest {
			vs = append(vs, Violation{Checker: "ledger", Detail: fmt.Sprintf("decision %d accepted token %d from %s after accepting token %d", i, o.Token, o.Writer, highest)})
		}
		if w, ok := owner[o.Token]; ok && w != o.Writer {
			same := ""
			if writer.Owner(w) == writer.Owner(o.Writer) {
				same = " (two processes of one pod)"
			}
			vs = append(vs, Violation{Checker: "ledger", Detail: fmt.Sprintf("decision %d accepted token %d from %s, already accepted from %s%s", i, o.Token, o.Writer, w, same)})
		} else if !ok {
			owner[o.Token] = o.Writer
		}
		highest = max(highest, o.Token)
	}
	return vs
}

// CheckIncarnations checks the workers' own records: no two processes of one pod (histories
// of one UID) had a write accepted under one token. A restart never keeps a token: the
// restarted process gets a new one, or its fence raise with the old one is refused (the dead
// process presented it first) and it abandons it.
func CheckIncarnations(hs []WorkerHistory) []Violation {
	type key struct {
		uid   string
		token int64
	}
	wrote := map[key][]string{} // writers (or history numbers) with an accepted write
	var order []key
	for i, h := range hs {
		who := h.Writer()
		if who == h.UID {
			who = fmt.Sprintf("%s (process %d)", h.UID, i)
		}
		seen := map[int64]bool{}
		for _, e := range h.Events {
			if e.Kind != EvReturn || e.Result != ResultOK || seen[e.Token] {
				continue
			}
			seen[e.Token] = true
			k := key{h.UID, e.Token}
			if len(wrote[k]) == 0 {
				order = append(order, k)
			}
			wrote[k] = append(wrote[k], who)
		}
	}
	var vs []Violation
	for _, k := range order {
		if ws := wrote[k]; len(ws) > 1 {
			vs = append(vs, Violation{Checker: "incarnations", Detail: fmt.Sprintf("%d processes of pod %s wrote under token %d: %s",
				len(ws), k.uid, k.token, strings.Join(ws, ", "))})
		}
	}
	return vs
}

// Overlap is the time two workers' leadership intervals overlap.
type Overlap struct {
	A, B     Interval
	Duration time.Duration
}

// Overlaps measures every overlap between intervals of different pods (UIDs), and reports
// as violations two pods leading with one token.
func Overlaps(ivs []Interval) ([]Overlap, []Violation) {
	sorted := append([]Interval(nil), ivs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Start < sorted[j].Start })
	var out []Overlap
	var vs []Violation
	for i := range sorted {
		for j := i + 1; j < len(sorted); j++ {
			a, b := sorted[i], sorted[j]
			if a.UID == b.UID {
				continue
			}
			if a.Token == b.Token {
				vs = append(vs, Violation{Checker: "overlap", Detail: fmt.Sprintf("%s (%s) and %s (%s) both led with token %d", a.Pod, a.UID, b.Pod, b.UID, a.Token)})
			}
			if b.Start >= a.End {
				continue
			}
			out = append(out, Overlap{A: a, B: b, Duration: time.Duration(min(a.End, b.End) - b.Start)})
		}
	}
	return out, vs
}

// CheckLiveness checks that the lock had a holder that wrote within bound of healed (both
// CLOCK_MONOTONIC ns); progressed is 0 when it never did.
func CheckLiveness(healed, progressed int64, bound time.Duration) []Violation {
	switch {
	case progressed == 0:
		return []Violation{{Checker: "liveness", Detail: fmt.Sprintf("no holder wrote within %v of the faults healing", bound)}}
	case time.Duration(progressed-healed) > bound:
		return []Violation{{Checker: "liveness", Detail: fmt.Sprintf("first write %v after the faults healed, bound %v", time.Duration(progressed-healed).Round(time.Millisecond), bound)}}
	}
	return nil
}
