package redischaos

import (
	"fmt"
	"sort"
	"time"
)

// grant is one holder's lock grant and the interval in which its Valid()
// was true, on CLOCK_MONOTONIC (one clock for every process of the machine).
type grant struct {
	holder     string
	token      int64
	start, end int64 // ns: after the acquire returned; the end of validity (or release)
}

// write is one write presented to the fenced resource.
type write struct {
	holder   string
	token    int64
	at       int64
	accepted bool
}

// history is what a run recorded.
type history struct {
	grants []grant
	writes []write
	// forgets are the instants of restarts that lost the keys and the token
	// counter (no persistence).
	forgets []int64
}

// verdict is what the checkers found.
type verdict struct {
	violations []string
	// maxOverlap is the largest overlap of two Valid() intervals that the
	// rules do not excuse.
	maxOverlap time.Duration
	// refusedAfterForget counts writes the fence refused from grants made
	// after a restart that forgot the counter: the documented outcome.
	refusedAfterForget int
	// repeatedTokens counts grants whose token was not above every token
	// granted before them (only excused after a forgetting restart).
	repeatedTokens int
}

// spansForget reports whether a grant's interval, or the time between two
// grants, contains a forgetting restart.
func (h history) forgetBetween(from, to int64) bool {
	for _, f := range h.forgets {
		if f >= from && f <= to {
			return true
		}
	}
	return false
}

// check runs every checker over h; margin is the lock's validity margin.
func check(h history, margin time.Duration) verdict {
	var v verdict
	gs := append([]grant(nil), h.grants...)
	sort.Slice(gs, func(i, j int) bool { return gs[i].start < gs[j].start })

	// Token order: each grant's token is above every earlier grant's, unless
	// a forgetting restart happened in between.
	var high int64
	var highAt int64
	for _, g := range gs {
		if g.token <= high {
			v.repeatedTokens++
			if !h.forgetBetween(highAt, g.start) {
				v.violations = append(v.violations, fmt.Sprintf("token order: %s got token %d after token %d was granted, with no forgetting restart in between", g.holder, g.token, high))
			}
			continue
		}
		high, highAt = g.token, g.start
	}

	// Overlap of Valid() intervals.
	for i := range gs {
		for j := i + 1; j < len(gs) && gs[j].start < gs[i].end; j++ {
			a, b := gs[i], gs[j]
			if a.holder == b.holder && a.token == b.token {
				continue
			}
			ov := time.Duration(min(a.end, b.end) - b.start)
			if h.forgetBetween(a.start, b.start) {
				continue // documented: the restart forgot a's key
			}
			v.maxOverlap = max(v.maxOverlap, ov)
			if ov > margin {
				v.violations = append(v.violations, fmt.Sprintf("overlap: %s (token %d) and %s (token %d) were both valid for %v, beyond the margin %v", a.holder, a.token, b.holder, b.token, ov, margin))
			}
		}
	}

	// Ledger decisions: accepted tokens never go down, and a write refused
	// with no excuse is reported.
	var fence int64
	for _, w := range h.writes {
		if w.accepted {
			if w.token < fence {
				v.violations = append(v.violations, fmt.Sprintf("ledger: %s's write with token %d accepted after token %d", w.holder, w.token, fence))
			}
			fence = max(fence, w.token)
			continue
		}
		if len(h.forgets) > 0 && w.at > h.forgets[0] && w.token < fence {
			v.refusedAfterForget++
		}
	}
	return v
}

// stalls reports each gap of more than limit between the end of one grant's
// interval and the start of the next grant, outside the excused windows
// ([from, to] on the same clock): a lock that stood still that long with
// waiters queued was held by no one, a grant left to a waiter that had
// gone. The gaps are measured over all grants in start order.
func stalls(h history, excused [][2]int64, limit time.Duration) []string {
	gs := append([]grant(nil), h.grants...)
	sort.Slice(gs, func(i, j int) bool { return gs[i].start < gs[j].start })
	var out []string
	end := int64(0)
	for i, g := range gs {
		if i > 0 && time.Duration(g.start-end) > limit && !within(excused, end, g.start) {
			out = append(out, fmt.Sprintf("stall: no grant for %v before %s (token %d)", time.Duration(g.start-end), g.holder, g.token))
		}
		end = max(end, g.end)
	}
	return out
}

// within reports whether [from, to] overlaps one of the windows.
func within(windows [][2]int64, from, to int64) bool {
	for _, w := range windows {
		if from <= w[1] && to >= w[0] {
			return true
		}
	}
	return false
}
