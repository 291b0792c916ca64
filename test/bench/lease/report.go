package main

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"time"
)

// Column order of the report; names match engine.name().
const (
	ours      = "lockwarden"
	theirs    = "etcd Mutex"
	floorName = "floor: put loop"
)

// report is everything the program prints at the end.
type report struct {
	setup      []string
	loadBefore string                        // machineLoad at the start
	results    map[string]map[string]*result // measurement name -> engine name -> result
}

// metric is one row of the main table: a number from one measurement's
// result, and how to show it.
type metric struct {
	label string
	run   string
	value func(*result) float64
	show  func(*result) string
}

func latencyRow(label, run string, p float64, handoff bool) metric {
	get := func(r *result) time.Duration {
		if handoff {
			return percentile(r.handoffs, p)
		}
		return percentile(r.latencies, p)
	}
	return metric{
		label: label, run: run,
		value: func(r *result) float64 { return float64(get(r)) / float64(time.Millisecond) },
		show:  func(r *result) string { return ms(get(r)) },
	}
}

func rateRow(label, run string) metric {
	return metric{
		label: label, run: run,
		value: (*result).rate,
		show:  func(r *result) string { return fmt.Sprintf("%.1f", r.rate()) },
	}
}

func fairnessRow(label, run string) metric {
	return metric{
		label: label, run: run,
		value: func(r *result) float64 { _, _, f := r.fairness(); return f },
		show: func(r *result) string {
			lo, hi, f := r.fairness()
			return fmt.Sprintf("%.2f (%d/%d)", f, lo, hi)
		},
	}
}

var metrics = []metric{
	latencyRow("uncontended acquire+release, p50 (ms)", "uncontended", 0.50, false),
	latencyRow("uncontended acquire+release, p99 (ms)", "uncontended", 0.99, false),
	latencyRow("handoff, shared key, 8 contenders, p50 (ms)", "shared8", 0.50, true),
	latencyRow("handoff, shared key, 8 contenders, p90 (ms)", "shared8", 0.90, true),
	latencyRow("handoff, shared key, 8 contenders, p99 (ms)", "shared8", 0.99, true),
	latencyRow("handoff, shared key, 32 contenders, p99 (ms)", "shared32", 0.99, true),
	rateRow("shared key, 8 contenders (cycles/s)", "shared8"),
	rateRow("shared key, 32 contenders (cycles/s)", "shared32"),
	rateRow("distinct keys, 1 contender (cycles/s)", "distinct1"),
	rateRow("distinct keys, 8 contenders (cycles/s)", "distinct8"),
	rateRow("distinct keys, 32 contenders (cycles/s)", "distinct32"),
	fairnessRow("fairness, shared key, 8 contenders (min/max cycles, worst round)", "shared8"),
	fairnessRow("fairness, shared key, 32 contenders (min/max cycles, worst round)", "shared32"),
}

// get returns the result of run for engine, or nil.
func (rep *report) get(run, engine string) *result { return rep.results[run][engine] }

// ratio returns ours/theirs for m, NaN if either is missing or theirs is 0.
func (rep *report) ratio(m metric) float64 {
	a, b := rep.get(m.run, ours), rep.get(m.run, theirs)
	if a == nil || b == nil {
		return math.NaN()
	}
	x, y := m.value(a), m.value(b)
	if y == 0 || x < 0 || y < 0 {
		return math.NaN()
	}
	return x / y
}

func (rep *report) ratioOf(label string) float64 {
	for _, m := range metrics {
		if m.label == label {
			return rep.ratio(m)
		}
	}
	panic("no metric " + label)
}

// fmtRatio shows a ratio with about three significant digits.
func fmtRatio(x float64) string {
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return "n/a"
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	case x >= 0.1:
		return fmt.Sprintf("%.2f", x)
	default:
		return fmt.Sprintf("%.3f", x)
	}
}

func (rep *report) show(run, engine string, m metric) string {
	if r := rep.get(run, engine); r != nil {
		return m.show(r)
	}
	return "n/a"
}

// write prints the setup, the table, the diagnostics, the goals and, last,
// the summary line. It returns errOverlap after printing if any run saw two
// holders at once.
func (rep *report) write(w io.Writer) error {
	var b strings.Builder
	b.WriteString("Setup:\n\n")
	for _, s := range rep.setup {
		fmt.Fprintf(&b, "- %s\n", s)
	}
	b.WriteString("\n| metric | lockwarden | etcd Mutex | ratio ours/mutex |\n| --- | ---: | ---: | ---: |\n")
	for _, m := range metrics {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", m.label, rep.show(m.run, ours, m), rep.show(m.run, theirs, m), fmtRatio(rep.ratio(m)))
	}
	floor := "n/a"
	if r := rep.get(floorRun, floorName); r != nil {
		floor = fmt.Sprintf("%.1f", r.rate())
	}
	fmt.Fprintf(&b, "\nOne-write floor (one client's loop of fsync'd etcd puts, each sent after the previous answer; "+
		"a handoff needs at least one durable write): %s puts/s; lockwarden's shared key, 32 contenders, is %s of it.\n",
		floor, fmtRatio(rep.floorFraction32()))
	rep.writeUsage(&b)
	rep.writeGoals(&b)
	fmt.Fprintf(&b, "\nsummary: shared8_cycles_ratio=%s handoff_p99_ratio=%s fairness=%s shared32_cycles_ratio=%s "+
		"distinct1_ratio=%s distinct8_ratio=%s distinct32_ratio=%s floor_fraction32=%s\n",
		fmtRatio(rep.ratioOf(shared8Row)),
		fmtRatio(rep.ratioOf(handoffP99Row)),
		fmtRatio(rep.fairness8()),
		fmtRatio(rep.ratioOf(shared32Row)),
		fmtRatio(rep.ratioOf(distinctRow(1))),
		fmtRatio(rep.ratioOf(distinctRow(8))),
		fmtRatio(rep.ratioOf(distinctRow(32))),
		fmtRatio(rep.floorFraction32()))
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	for run, byEngine := range rep.results {
		for engine, r := range byEngine {
			if r.overlaps > 0 {
				return fmt.Errorf("%s, %s: %d times: %w", run, engine, r.overlaps, errOverlap)
			}
		}
	}
	return nil
}

// Labels of the rows the summary and the goals use.
const (
	shared8Row    = "shared key, 8 contenders (cycles/s)"
	shared32Row   = "shared key, 32 contenders (cycles/s)"
	handoffP99Row = "handoff, shared key, 8 contenders, p99 (ms)"
)

// distinctRow is the label of the distinct-keys row with n contenders.
func distinctRow(n int) string {
	if n == 1 {
		return "distinct keys, 1 contender (cycles/s)"
	}
	return fmt.Sprintf("distinct keys, %d contenders (cycles/s)", n)
}

// floorFraction32 returns lockwarden's cycles/s on the shared key with 32
// contenders over the floor's puts/s, NaN if either is missing.
func (rep *report) floorFraction32() float64 {
	a, f := rep.get("shared32", ours), rep.get(floorRun, floorName)
	if a == nil || f == nil || f.rate() == 0 {
		return math.NaN()
	}
	return a.rate() / f.rate()
}

func (rep *report) fairness8() float64 {
	if r := rep.get("shared8", ours); r != nil {
		_, _, f := r.fairness()
		return f
	}
	return math.NaN()
}

// writeUsage prints what each run cost, per completed cycle: the client's
// requests, etcd's raft proposals and WAL fsyncs, and the process's CPU.
func (rep *report) writeUsage(b *strings.Builder) {
	fmt.Fprintf(b, "\nCost per completed cycle (all contenders' etcd requests; CPU of the whole process, of %d cores):\n\n", runtime.NumCPU())
	b.WriteString("| run | engine | cycles | cycles/s by round | Txn | Range | DeleteRange | watches created | watch streams opened | raft proposals | WAL fsyncs | mean fsync (ms) | CPU busy | CPU per cycle (µs) |\n")
	b.WriteString("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for _, name := range measurementNames() {
		for _, engine := range []string{ours, theirs, floorName} {
			r := rep.get(name, engine)
			if r == nil {
				continue
			}
			u, n := r.usage, float64(max(r.cycles, 1))
			meanFsync := "n/a"
			if u.fsyncs > 0 {
				meanFsync = fmt.Sprintf("%.2f", u.fsyncSeconds*1000/float64(u.fsyncs))
			}
			busy := u.cpu.Seconds() / (u.wall.Seconds() * float64(runtime.NumCPU())) * 100
			lo, hi := r.rateSpread()
			fmt.Fprintf(b, "| %s | %s | %d | %.0f-%.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %.0f%% | %.0f |\n",
				name, engine, r.cycles, lo, hi, float64(u.txn)/n, float64(u.rng)/n, float64(u.del)/n, float64(u.watches)/n, float64(u.streams)/n,
				u.proposals/n, float64(u.fsyncs)/n, meanFsync, busy, float64(u.cpu.Microseconds())/n)
		}
	}
}

// writeGoals prints the goals of issue 24 and whether this run met them.
func (rep *report) writeGoals(b *strings.Builder) {
	met := func(ok bool, x float64) string {
		switch {
		case math.IsNaN(x):
			return "not measured"
		case ok:
			return "met"
		default:
			return "NOT met"
		}
	}
	b.WriteString("\n| goal | target | measured | |\n| --- | --- | ---: | --- |\n")
	s8 := rep.ratioOf(shared8Row)
	fmt.Fprintf(b, "| shared key, 8 contenders: cycles/s ours/mutex | >= 10 | %s | %s |\n", fmtRatio(s8), met(s8 >= 10, s8))
	s32, f32 := rep.ratioOf(shared32Row), rep.floorFraction32()
	fmt.Fprintf(b, "| shared key, 32 contenders: cycles/s ours/mutex | >= 2.5 | %s | %s |\n", fmtRatio(s32), met(s32 >= 2.5, s32))
	fmt.Fprintf(b, "| shared key, 32 contenders: cycles/s ours/floor | >= 0.5 | %s | %s |\n", fmtRatio(f32), met(f32 >= 0.5, f32))
	h := rep.ratioOf(handoffP99Row)
	fmt.Fprintf(b, "| handoff p99 ours/mutex | <= 0.1 | %s | %s |\n", fmtRatio(h), met(h <= 0.1, h))
	f := rep.fairness8()
	fmt.Fprintf(b, "| fairness (lockwarden, shared key, 8 contenders) | >= 0.9 | %s | %s |\n", fmtRatio(f), met(f >= 0.9, f))
	var shown []string
	ok, seen := true, math.NaN()
	for _, n := range []int{1, 8, 32} {
		x := rep.ratioOf(distinctRow(n))
		shown = append(shown, fmtRatio(x))
		if !math.IsNaN(x) {
			seen = x
			ok = ok && x >= 1
		}
	}
	fmt.Fprintf(b, "| distinct keys (1 / 8 / 32 contenders): cycles/s ours/mutex | >= 1 each | %s | %s |\n",
		strings.Join(shown, " / "), met(ok, seen))
}
