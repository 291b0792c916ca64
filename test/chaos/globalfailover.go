package chaos

import (
	"sort"
	"time"
)

// Write is one write the ledger accepted, as its writer recorded it.
type Write struct {
	Pod   string `json:"pod"`
	UID   string `json:"uid"`
	Token int64  `json:"token"`
	Mono  int64  `json:"mono"` // CLOCK_MONOTONIC ns of the accepted reply
}

// FirstWrite returns the first write in hs that the ledger accepted after the instant after
// (CLOCK_MONOTONIC ns) from a worker whose pod UID in accepts; ok false when there is none.
// The failover after a fault on the holder cluster is the time from the fault to the other
// cluster's first write (docs/global.md, "Failover").
func FirstWrite(hs []WorkerHistory, after int64, in func(uid string) bool) (Write, bool) {
	var best Write
	found := false
	for _, h := range hs {
		if !in(h.UID) {
			continue
		}
		for _, e := range h.Events {
			if e.Kind != EvReturn || e.Result != ResultOK || e.Mono <= after {
				continue
			}
			if !found || e.Mono < best.Mono {
				best, found = Write{Pod: h.Pod, UID: h.UID, Token: e.Token, Mono: e.Mono}, true
			}
			break // a history's events are in its own clock's order
		}
	}
	return best, found
}

// Quantile returns the q-quantile (0 <= q <= 1) of ds by the nearest-rank method (the
// smallest value with at least q of the values at or below it), 0 for none.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(q*float64(len(s)) + 0.999999999) // ceil, without float noise at exact ranks
	return s[min(max(rank, 1), len(s))-1]
}

// HandoverGaps measures, for every interval that starts after an interval of another cluster
// ended (clusterOf maps a pod UID to its cluster), the gap between the end of the latest such
// interval and its start: how far apart in time the pods of two clusters led. An overlap is
// not a gap (Overlaps reports it).
func HandoverGaps(ivs []Interval, clusterOf func(uid string) string) []time.Duration {
	var out []time.Duration
	for _, b := range ivs {
		var latest int64
		found, overlapped := false, false
		for _, a := range ivs {
			if clusterOf(a.UID) == clusterOf(b.UID) {
				continue
			}
			if a.End > b.Start {
				overlapped = overlapped || a.Start <= b.Start
				continue
			}
			if !found || a.End > latest {
				latest, found = a.End, true
			}
		}
		if found && !overlapped {
			// only the first interval of b's cluster after that end is a handover
			first := true
			for _, c := range ivs {
				if clusterOf(c.UID) == clusterOf(b.UID) && c.Start >= latest && c.Start < b.Start {
					first = false
					break
				}
			}
			if first {
				out = append(out, time.Duration(b.Start-latest))
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
