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
}

func splitLines(s string) []string { return strings.Split(strings.ReplaceAll(s, "\r", ""), "\n") }

func cut(s, prefix string) (string, bool) {
	if strings.HasPrefix(s, prefix) {
		return s[len(prefix):], true
	}
	return "", false
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

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
		p("| %s | %s | %s | %s | %s |", x.e.name, ms(pct(x.unc, .5)), ms(pct(x.unc, .99)),
			perCycle(x.uncCounts.commands, int64(len(x.unc))), perCycle(x.uncCounts.requests, int64(len(x.unc))))
	}
	p("")
	p("### One shared key (hold %v, %v per run)", c.hold, c.contendFor)
	p("")
	p("| engine | contenders | cycles/s | handoff p50 (ms) | handoff p99 (ms) | fairness (min/max) | commands/cycle | requests/cycle | overlaps |")
	p("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, n := range []int{8, 32} {
		for _, x := range r.results {
			s, k := x.shared[n], x.sharedCount[n]
			p("| %s | %d | %.0f | %s | %s | %.2f (%d/%d) | %s | %s | %d |", x.e.name, n, s.rate(), ms(pct(s.handoffs, .5)), ms(pct(s.handoffs, .99)),
				s.fairness(), minOf(s.cycles), maxOf(s.cycles), perCycle(k.commands, s.total()), perCycle(k.requests, s.total()), s.overlaps)
		}
	}
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

func (r *report) goals(p func(string, ...any)) {
	ours, peers := r.results[0], r.results[1:]
	p("### Goals")
	p("")
	fastest := peers[0]
	for _, x := range peers {
		if pct(x.unc, .5) < pct(fastest.unc, .5) {
			fastest = x
		}
	}
	ratio := float64(pct(ours.unc, .5)) / float64(pct(fastest.unc, .5))
	p("- uncontended within 1.2x of the fastest peer (%s): p50 ratio %.2fx (p99 %.2fx): **%s**", fastest.e.name, ratio,
		float64(pct(ours.unc, .99))/float64(pct(fastest.unc, .99)), verdict(ratio <= 1.2))
	for _, n := range []int{8, 32} {
		var parts []string
		beats := true
		for _, x := range peers {
			q := ours.shared[n].rate() / x.shared[n].rate()
			beats = beats && q > 1
			parts = append(parts, fmt.Sprintf("%.2fx %s", q, x.e.name))
		}
		f := ours.shared[n].fairness()
		p("- shared key, %d contenders: cycles/s vs %s: **%s**; fairness %.2f (goal >= 0.8): **%s**", n,
			strings.Join(parts, ", "), verdict(beats), f, verdict(f >= 0.8))
	}
	var ov int64
	for _, x := range r.results {
		for _, s := range x.shared {
			ov += s.overlaps
		}
		ov += x.distinct.overlaps
	}
	p("- overlapping holders seen by the benchmark (any engine, no faults injected): %d", ov)
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
