package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// result is one measurement by one engine: one round, or the merge of all.
type result struct {
	m         measurement
	window    time.Duration // the windows' total, or the time the counted cycles took
	cycles    int
	latencies []time.Duration
	handoffs  []time.Duration
	overlaps  int64
	usage     usage
	rounds    []round
}

// round is what fairness and the spread between rounds are computed from.
type round struct {
	perContender []int // completed cycles of each contender
	cycles       int
	window       time.Duration
}

// merge adds the next round o to r.
func (r *result) merge(o *result) {
	r.window += o.window
	r.cycles += o.cycles
	r.latencies = append(r.latencies, o.latencies...)
	r.handoffs = append(r.handoffs, o.handoffs...)
	r.overlaps += o.overlaps
	r.usage = r.usage.add(o.usage)
	r.rounds = append(r.rounds, o.rounds...)
}

// rate returns cycles per second.
func (r *result) rate() float64 { return float64(r.cycles) / r.window.Seconds() }

// rateSpread returns the lowest and highest cycles per second of one round.
func (r *result) rateSpread() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, rd := range r.rounds {
		x := float64(rd.cycles) / rd.window.Seconds()
		lo, hi = min(lo, x), max(hi, x)
	}
	return lo, hi
}

// fairness returns, for the least fair round, the fewest and most cycles
// one contender completed in it, and their ratio (1 when every contender did
// as many). Rounds are not summed: summing would hide a lock that is unfair
// in every round to a different contender.
func (r *result) fairness() (lo, hi int, ratio float64) {
	ratio = math.NaN()
	for _, rd := range r.rounds {
		l, h := slices.Min(rd.perContender), slices.Max(rd.perContender)
		f := math.NaN()
		if h > 0 {
			f = float64(l) / float64(h)
		}
		if math.IsNaN(ratio) || f < ratio {
			lo, hi, ratio = l, h, f
		}
	}
	return lo, hi, ratio
}

// brief is the progress line after a run.
func (r *result) brief() string {
	lo, hi := r.rateSpread()
	s := fmt.Sprintf("%6d cycles in %5.1fs = %7.1f/s (rounds %.0f-%.0f)", r.cycles, r.window.Seconds(), r.rate(), lo, hi)
	if len(r.latencies) > 0 {
		s += fmt.Sprintf("  cycle p50 %s p99 %s ms", ms(percentile(r.latencies, 0.50)), ms(percentile(r.latencies, 0.99)))
	}
	if len(r.handoffs) > 0 {
		s += fmt.Sprintf("  handoff p50 %s p99 %s ms", ms(percentile(r.handoffs, 0.50)), ms(percentile(r.handoffs, 0.99)))
	}
	if r.m.shared && r.m.contenders > 1 {
		few, most, f := r.fairness()
		s += fmt.Sprintf("  fairness %.2f (%d/%d, worst round)", f, few, most)
	}
	return s
}

// percentile returns the nearest-rank p-quantile of ds, or -1 when ds is
// empty.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return -1
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// ms formats d in milliseconds.
func ms(d time.Duration) string {
	if d < 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond))
}
