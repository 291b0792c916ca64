package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

type report struct {
	cfg          config
	began        time.Time
	took         time.Duration
	nproc        int
	load         string
	redisVersion string
	results      []*result
	wait         waitCost
	floor        floor
}

func splitLines(s string) []string { return strings.Split(strings.ReplaceAll(s, "\r", ""), "\n") }

func cut(s, prefix string) (string, bool) {
	if strings.HasPrefix(s, prefix) {
		return s[len(prefix):], true
	}
	return "", false
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

// ms3 is ms with microseconds, for the uncontended rows, whose p50s differ
// by a few of them.
func ms3(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

func perCycle(n, cycles int64) string {
	if cycles == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(n)/float64(cycles))
}

func (r *report) write(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	c := r.cfg
	p("Command: `make bench-redis` (`go run ./test/bench/redis`), run %s, took %v.", r.began.Format("2006-01-02 15:04 UTC"), r.took.Round(time.Second))
	p("")
	p("Setup:")
	p("")
	p("- one redis-server %s (Debian package, started by the benchmark on a loopback port, no persistence), every engine against it in turn, in one run", r.redisVersion)
	p("- machine: nproc %d, load average at start %s (shared with other engineers' builds and tests: noisy)", r.nproc, r.load)
	p("- every contender has its own client (its own connections), as separate processes would; lock TTL %v in the acquire/release runs", c.lockTTL)
	p("- peers that poll (bsm/redislock, redsync) retry every %v, shorter than their usual settings; redsync with unlimited tries", peerRetry)
	p("- each scenario runs in %d rounds, the engines in a rotated order each round, and each engine's rounds are added up (the machine's load changes by the minute)", rounds)
	p("- commands: server side, from INFO commandstats (commands run inside scripts count); requests: client side, a command or a pipeline (each a round trip unless auto-pipelined)")
	p("")
	p("### Uncontended acquire + release (%d cycles, one contender)", c.uncontended)
	p("")
	p("| engine | p50 (ms) | p99 (ms) | commands/cycle | requests/cycle |")
	p("| --- | ---: | ---: | ---: | ---: |")
	for _, x := range r.results {
		p("| %s | %s | %s | %s | %s |", x.e.name, ms3(pct(x.unc, .5)), ms3(pct(x.unc, .99)),
			perCycle(x.uncCounts.commands, int64(len(x.unc))), perCycle(x.uncCounts.requests, int64(len(x.unc))))
	}
	p("")
	for _, hold := range []time.Duration{c.hold, 0} {
		p("### One shared key (hold %v, %v per run)", hold, c.contendFor)
		p("")
		p("| engine | contenders | cycles/s | handoff p50 (ms) | handoff p99 (ms) | fairness (min/max) | commands/cycle | requests/cycle | overlaps |")
		p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
		for _, n := range []int{8, 32} {
			rw := row{n, hold}
			for _, x := range r.results {
				s, k := x.shared[rw], x.sharedCount[rw]
				p("| %s | %d | %.0f | %s | %s | %.2f (%d/%d) | %s | %s | %d |", x.e.name, n, s.rate(), ms(pct(s.handoffs, .5)), ms(pct(s.handoffs, .99)),
					s.fairness(), minOf(s.cycles), maxOf(s.cycles), perCycle(k.commands, s.total()), perCycle(k.requests, s.total()), s.overlaps)
			}
		}
		p("")
	}
	p("### The floor: a bare SET NX PX + DEL loop (one client, %v)", c.floorFor)
	p("")
	p("| loop | cycles/s | p50 (ms) | p99 (ms) | pkg/redislock's cycles/s as a fraction of it |")
	p("| --- | ---: | ---: | ---: | --- |")
	ours := r.results[0]
	p("| SET NX PX, DEL | %.0f | %s | %s | shared key at hold 0: %.2f with 8 contenders, %.2f with 32 |", r.floor.rate(),
		ms(pct(r.floor.lat, .5)), ms(pct(r.floor.lat, .99)),
		ours.shared[row{8, 0}].rate()/r.floor.rate(), ours.shared[row{32, 0}].rate()/r.floor.rate())
	p("")
	p("### Distinct keys (8 contenders, one key each, hold %v, %v)", c.hold, c.distinctFor)
	p("")
	p("| engine | cycles/s |")
	p("| --- | ---: |")
	for _, x := range r.results {
		p("| %s | %.0f |", x.e.name, x.distinct.rate())
	}
	p("")
	p("### Renewal cost (%d held locks, TTL %v, %v)", c.renewLocks, c.renewTTL, c.renewFor)
	p("")
	p("| engine | how a held lock is kept | commands per held lock per second | requests per held lock per second |")
	p("| --- | --- | ---: | ---: |")
	for _, x := range r.results {
		per := float64(c.renewLocks) * x.renewFor.Seconds()
		p("| %s | %s | %.2f | %.2f |", x.e.name, x.e.renewal, float64(x.renewCounts.commands)/per, float64(x.renewCounts.requests)/per)
	}
	p("")
	p("### Cost of WaitReplicas (pkg/redislock, a primary with one replica on this machine, %d uncontended cycles)", c.uncontended)
	p("")
	p("| acquire | p50 (ms) | p99 (ms) |")
	p("| --- | ---: | ---: |")
	p("| without WAIT | %s | %s |", ms(pct(r.wait.without, .5)), ms(pct(r.wait.without, .99)))
	p("| WaitReplicas 1 (the WAIT follows the grant on the same connection) | %s | %s |", ms(pct(r.wait.with, .5)), ms(pct(r.wait.with, .99)))
	p("")
	p("### What the holder knows")
	p("")
	p("| engine | version | the holder learns its lock is no longer valid by |")
	p("| --- | --- | --- |")
	for _, x := range r.results {
		p("| %s | %s | %s |", x.e.name, x.e.version, x.e.validity)
	}
	p("")
	r.goals(p)
}

// summary is the numbers of issue 24's goals, from one run.
type summary struct {
	fastest                 *result // the peer with the lowest uncontended p50
	uncontendedP50RatioBest float64 // ours over the fastest peer's p50 (lower is better)
	minRatio                map[int]float64
	best                    map[int]*result // the peer with the most cycles/s at hold 0
	fairness                map[int]float64 // ours at hold 0
}

func (r *report) summarize() summary {
	ours, peers := r.results[0], r.results[1:]
	s := summary{fastest: peers[0], minRatio: map[int]float64{}, best: map[int]*result{}, fairness: map[int]float64{}}
	for _, x := range peers {
		if pct(x.unc, .5) < pct(s.fastest.unc, .5) {
			s.fastest = x
		}
	}
	s.uncontendedP50RatioBest = float64(pct(ours.unc, .5)) / float64(pct(s.fastest.unc, .5))
	for _, n := range []int{8, 32} {
		rw := row{n, 0}
		s.best[n] = peers[0]
		for _, x := range peers {
			if x.shared[rw].rate() > s.best[n].shared[rw].rate() {
				s.best[n] = x
			}
		}
		s.minRatio[n] = ours.shared[rw].rate() / s.best[n].shared[rw].rate()
		s.fairness[n] = ours.shared[rw].fairness()
	}
	return s
}

func (r *report) goals(p func(string, ...any)) {
	ours, peers := r.results[0], r.results[1:]
	s := r.summarize()
	p("### Goals (issue 24)")
	p("")
	p("- uncontended p50 at most 1.1x the fastest peer's (%s): %.2fx (p99 %.2fx): **%s**", s.fastest.e.name, s.uncontendedP50RatioBest,
		float64(pct(ours.unc, .99))/float64(pct(s.fastest.unc, .99)), verdict(s.uncontendedP50RatioBest <= 1.1))
	for _, hold := range []time.Duration{0, r.cfg.hold} {
		for _, n := range []int{8, 32} {
			rw := row{n, hold}
			var parts []string
			for _, x := range peers {
				parts = append(parts, fmt.Sprintf("%.2fx %s", ours.shared[rw].rate()/x.shared[rw].rate(), x.e.name))
			}
			f := ours.shared[rw].fairness()
			if hold == 0 {
				p("- shared key, %d contenders, hold 0: at least 1.5x every peer's cycles/s: %s: **%s**; fairness %.2f (goal >= 0.9): **%s**", n,
					strings.Join(parts, ", "), verdict(s.minRatio[n] >= 1.5), f, verdict(f >= 0.9))
			} else {
				p("- shared key, %d contenders, hold %v (no goal; bounded by the hold): %s; fairness %.2f", n, hold, strings.Join(parts, ", "), f)
			}
		}
	}
	var ov int64
	for _, x := range r.results {
		for _, s := range x.shared {
			ov += s.overlaps
		}
		ov += x.distinct.overlaps
		if n := x.e.stalls.Load(); n > 0 {
			p("- %s: %d acquires waited %v without a grant and were abandoned and tried again by the benchmark (see stallAfter in engines.go)", x.e.name, n, stallAfter)
		}
	}
	p("- overlapping holders seen by the benchmark (any engine, no faults injected): %d", ov)
	p("")
	p("summary: uncontended_p50_ratio_best=%.2f shared8_min_ratio=%.2f shared32_min_ratio=%.2f fairness8=%.2f fairness32=%.2f",
		s.uncontendedP50RatioBest, s.minRatio[8], s.minRatio[32], s.fairness[8], s.fairness[32])
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

func minOf(xs []int64) int64 {
	m := xs[0]
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

func maxOf(xs []int64) int64 {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
