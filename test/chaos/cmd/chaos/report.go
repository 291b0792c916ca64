package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockwarden/lockwarden/test/chaos"
)

// histories reads every worker's history file.
func (r *run) histories() []chaos.WorkerHistory {
	r.mu.Lock()
	workers := append([]*workerProc(nil), r.workers...)
	r.mu.Unlock()
	var out []chaos.WorkerHistory
	for _, w := range workers {
		h := chaos.WorkerHistory{Pod: w.pod, UID: w.uid}
		if !w.p.running() {
			h.Exited = w.p.exitedAt
		}
		if f, err := os.Open(w.history); err == nil {
			h.Events, _ = chaos.ReadEvents(f)
			_ = f.Close()
		}
		out = append(out, h)
	}
	return out
}

// lives lists every worker process with when it started and exited.
func (r *run) lives() []chaos.Life {
	r.mu.Lock()
	workers := append([]*workerProc(nil), r.workers...)
	r.mu.Unlock()
	var out []chaos.Life
	for _, w := range workers {
		l := chaos.Life{UID: w.uid, Start: w.p.startedAt}
		if !w.p.running() {
			l.Exit = w.p.exitedAt
		}
		out = append(out, l)
	}
	return out
}

// handoffRule is the wait the controller owes a holder that may still run:
// max(lockDelay, lease), observed by the harness's watch up to 500 ms late.
func (h *harness) handoffRule() chaos.HandoffRule {
	return chaos.HandoffRule{Wait: max(h.timing.LockDelay, h.timing.Lease), Slack: 500 * time.Millisecond}
}

// restartRule is what a restarted holder's term must respect: the handoff rule's wait, and
// an election TTL for the controller to act on what it sees.
func (h *harness) restartRule() chaos.RestartRule {
	hr := h.handoffRule()
	return chaos.RestartRule{Wait: hr.Wait, Slack: hr.Slack, React: h.timing.ElectionTTL}
}

// ledgerName names the run's ledger by its workload: its refusals are counted apart.
func ledgerName(s chaos.Schedule) string {
	if s.Engine() {
		return chaos.LedgerEngine
	}
	return chaos.LedgerPods
}

// check runs every checker on the run's histories; a failing run is saved. outs are the
// decisions of each ledger, slot by slot. The one-slot checkers run on each slot's part of the
// histories, status and ledger (chaos.BySlot; for a one-slot lock, all of them), so that a
// slot run holds every slot to what a one-slot run holds its lock to; across the lock,
// CheckHolders and CheckOneSlotPerPod.
func (r *run) check(outs [][]chaos.Outcome) *result {
	n := r.sched.Slots()
	outs = append(outs, make([][]chaos.Outcome, max(0, n-len(outs)))...) // ledgers that never started decided nothing
	res := &result{sched: r.sched, faults: r.faults, liveness: r.liveness, ledger: ledgerName(r.sched), slots: n}
	var outcomes []chaos.Outcome
	for _, o := range outs {
		outcomes = append(outcomes, o...)
	}
	for _, o := range outcomes {
		if o.Accepted {
			res.ledgerAccepted++
		} else {
			res.refused++
		}
	}
	hs := r.histories()
	bySlot, vs := chaos.BySlot(hs, n)
	r.mu.Lock()
	obs := append([]chaos.StatusObs(nil), r.obs...)
	slotObs := [][]chaos.StatusObs{obs}
	for i := 1; i < n; i++ {
		slotObs = append(slotObs, append([]chaos.StatusObs(nil), r.slotObs[int32(i)]...))
	}
	vs = append(vs, r.violations...)
	r.mu.Unlock()
	lives := r.lives()
	restarts := r.restarts(hs)
	var ops []chaos.LedgerOp
	var ivs []chaos.Interval
	var infos []porcupine.LinearizationInfo
	res.linear = string(porcupine.Ok)
	for i := range n {
		in := func(v []chaos.Violation) []chaos.Violation { return v }
		if n > 1 {
			in = func(v []chaos.Violation) []chaos.Violation { return chaos.InSlot(i, v) }
		}
		sops := chaos.LedgerOps(bySlot[i])
		ops = append(ops, sops...)
		var sivs []chaos.Interval
		for _, h := range bySlot[i] {
			sivs = append(sivs, h.Intervals()...)
		}
		ivs = append(ivs, sivs...)
		vs = append(vs, in(chaos.CheckTokens(slotObs[i]))...)
		vs = append(vs, in(chaos.CheckLedger(outs[i]))...)
		lin, info, lvs := chaos.CheckLinearizable(sops, 30*time.Second)
		infos = append(infos, info)
		res.linear = worseLinear(res.linear, string(lin))
		vs = append(vs, in(lvs)...)
		overlaps, ovs := chaos.Overlaps(sivs)
		res.overlaps = append(res.overlaps, overlaps...)
		vs = append(vs, in(ovs)...)
		vs = append(vs, in(chaos.CheckOverlaps(overlaps, 0))...)
		vs = append(vs, in(chaos.CheckHandoffs(slotObs[i], lives, r.h.handoffRule()))...)
		vs = append(vs, in(chaos.CheckIncarnations(bySlot[i]))...)
		var srs []chaos.Restart
		for _, rs := range restarts {
			if int(rs.Slot) == i {
				srs = append(srs, rs)
			}
		}
		vs = append(vs, in(chaos.CheckRestarts(slotObs[i], srs, r.h.restartRule()))...)
	}
	res.accepted, res.rejected, res.ambiguous = countOps(ops)
	if n > 1 {
		most, hvs := chaos.CheckHolders(ivs, n, 0)
		res.maxHolders = most
		vs = append(vs, hvs...)
		vs = append(vs, chaos.CheckOneSlotPerPod(ivs, 0)...)
		res.slotRefused = chaos.Refusals(outs)
		res.slotStalls = chaos.SlotStalls(bySlot)
		if r.sched.Counts()[chaos.SlotsStall] > 0 {
			vs = append(vs, chaos.CheckSlotStalls(res.slotStalls)...) // whether or not a stall reached a holder
		}
	}
	vs = append(vs, chaos.CheckStalls(hs, r.faults[chaos.WorkerStall]+r.faults[chaos.EngineStall])...)
	if r.sched.Routing() {
		r.mu.Lock()
		slices := append([]chaos.SliceObs(nil), r.slices...)
		r.mu.Unlock()
		vs = append(vs, chaos.CheckRouting(obs, slices)...)
		res.slices, res.routed = routedCounts(slices)
		if b, err := json.MarshalIndent(slices, "", "  "); err == nil {
			_ = os.WriteFile(filepath.Join(r.dir, "slices.json"), b, 0o644)
		}
	}
	res.stalls = chaos.Stalls(hs)
	res.violations = vs
	r.mu.Lock()
	_ = os.WriteFile(filepath.Join(r.dir, "timeline.txt"), []byte(strings.Join(r.notes, "\n")+"\n"), 0o644)
	r.mu.Unlock()
	if b, err := json.MarshalIndent(slotObs, "", "  "); err == nil && n > 1 {
		_ = os.WriteFile(filepath.Join(r.dir, "slot-status.json"), b, 0o644)
	}
	if b, err := json.MarshalIndent(obs, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(r.dir, "status.json"), b, 0o644)
	}
	if len(vs) > 0 || res.linear == string(porcupine.Unknown) {
		res.saved = r.save(hs, ivs, ops, slotObs, outs, res.overlaps, vs, infos, restarts)
	}
	return res
}

// countOps counts the writes as their clients saw them: accepted, refused, without a reply.
func countOps(ops []chaos.LedgerOp) (accepted, rejected, ambiguous int) {
	for _, o := range ops {
		switch {
		case o.Ambiguous:
			ambiguous++
		case o.Accepted:
			accepted++
		default:
			rejected++
		}
	}
	return accepted, rejected, ambiguous
}

// worseLinear is the worse of two porcupine results: Illegal, then Unknown, then Ok.
func worseLinear(a, b string) string {
	rank := map[string]int{string(porcupine.Ok): 0, string(porcupine.Unknown): 1, string(porcupine.Illegal): 2}
	if rank[b] > rank[a] {
		return b
	}
	return a
}

// save writes the run's seed, schedule, histories and porcupine's HTML under the out dir.
func (r *run) save(hs []chaos.WorkerHistory, ivs []chaos.Interval, ops []chaos.LedgerOp, slotObs [][]chaos.StatusObs,
	outs [][]chaos.Outcome, overlaps []chaos.Overlap, vs []chaos.Violation, infos []porcupine.LinearizationInfo, restarts []chaos.Restart) string {
	dir := filepath.Join(r.h.outDir, fmt.Sprintf("seed-%d-run-%d", r.sched.Seed, r.sched.Run))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ""
	}
	write := func(name string, v any) {
		b, err := json.MarshalIndent(v, "", "  ")
		if err == nil {
			_ = os.WriteFile(filepath.Join(dir, name), b, 0o644)
		}
	}
	write("schedule.json", r.sched)
	write("worker-histories.json", hs)
	write("intervals.json", ivs)
	write("ledger-ops.json", ops)
	write("status.json", slotObs[0])
	if len(slotObs) > 1 {
		write("ledger-outcomes.json", outs) // one list per slot's ledger
		write("slot-status.json", slotObs)  // one list per slot
	} else {
		write("ledger-outcomes.json", outs[0])
	}
	if r.sched.Routing() {
		r.mu.Lock()
		slices := append([]chaos.SliceObs(nil), r.slices...)
		r.mu.Unlock()
		write("slices.json", slices)
	}
	write("overlaps.json", overlaps)
	write("violations.json", vs)
	write("lives.json", r.lives())
	write("restarts.json", restarts)
	for i, info := range infos {
		name := "porcupine.html"
		if i > 0 {
			name = fmt.Sprintf("porcupine-slot-%d.html", i)
		}
		_ = chaos.Visualize(info, filepath.Join(dir, name))
	}
	r.mu.Lock()
	notes := append([]string(nil), r.notes...)
	r.mu.Unlock()
	head := fmt.Sprintf("seed %d run %d schedule %s\n%s\n\nreplay: %s", r.sched.Seed, r.sched.Run, r.sched.Hash(), r.sched, r.h.replay(r.sched))
	writeReadme(dir, head, vs, notes, r.dir)
	copyLogs(r.dir, dir, "") // the process logs with the histories
	return dir
}

// writeReadme writes a saved run's README.txt: head, the violations, the timeline and where
// the process logs are.
func writeReadme(dir, head string, vs []chaos.Violation, notes []string, logs string) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\n", head)
	for _, v := range vs {
		fmt.Fprintln(&b, v)
	}
	fmt.Fprintln(&b, "\ntimeline:")
	for _, n := range notes {
		fmt.Fprintln(&b, n)
	}
	fmt.Fprintf(&b, "\nprocess logs: %s\n", logs)
	_ = os.WriteFile(filepath.Join(dir, "README.txt"), []byte(b.String()), 0o644)
}

// copyLogs copies the process logs and histories in from to to, their names prefixed.
func copyLogs(from, to, prefix string) {
	entries, err := os.ReadDir(from)
	if err != nil {
		return
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".log") || strings.HasSuffix(e.Name(), ".jsonl") {
			if data, err := os.ReadFile(filepath.Join(from, e.Name())); err == nil {
				_ = os.WriteFile(filepath.Join(to, prefix+e.Name()), data, 0o644)
			}
		}
	}
}

// line is the run's one-line report.
func (res *result) line() string {
	var maxOverlap time.Duration
	for _, o := range res.overlaps {
		maxOverlap = max(maxOverlap, o.Duration)
	}
	var live time.Duration
	for _, d := range res.liveness {
		live = max(live, d)
	}
	s := fmt.Sprintf("run %d seed %d schedule %s faults %s writes accepted %d rejected %d ambiguous %d ledger %s refused %d (stalled writes refused %d of %d) overlaps %d (max %v) linearizable %s recovery max %v violations %d (%v)",
		res.sched.Run, res.sched.Seed, res.sched.Hash(), kindList(res.faults), res.accepted, res.rejected, res.ambiguous,
		res.ledger, res.refused, res.stalls.Refused, res.stalls.Stalled,
		len(res.overlaps), maxOverlap.Round(time.Millisecond), res.linear, live.Round(time.Millisecond), len(res.violations), res.elapsed.Round(time.Second))
	if res.sched.Routing() {
		s += fmt.Sprintf(" routing slices %d (listing a pod %d)", res.slices, res.routed)
	}
	if m := res.sched.Worker(); m != chaos.WorkerElector {
		s += " workers " + m
	}
	if res.slots > 1 {
		stalled := make([]int, len(res.slotStalls))
		for i, st := range res.slotStalls {
			stalled[i] = st.Refused
		}
		s += fmt.Sprintf(" slots %d (pods holding valid terms at once, max %d) ledger refused per slot %v (stalled writes refused per slot %v)",
			res.slots, res.maxHolders, res.slotRefused, stalled)
	}
	return s
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func kindList(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// totals accumulates results.
type totals struct {
	runs, accepted, rejected, ambiguous, overlaps, violations, failedRuns int
	maxOverlap                                                            time.Duration
	unknownLinear                                                         int
	found                                                                 []string // every violation, with its run and replay command
	ledgers                                                               map[string]*chaos.LedgerTally
	kinds                                                                 map[string]*kindTally
}

// kindTally is the coverage of one fault kind: how often it was injected, and what the ledgers
// of the runs that had it decided (issue 25 item 8's table).
type kindTally struct {
	injected, runs, accepted, refused, violations int
}

func (t *totals) add(res *result) {
	if t.ledgers == nil {
		t.ledgers = map[string]*chaos.LedgerTally{}
	}
	lt := t.ledgers[res.ledger]
	if lt == nil {
		lt = &chaos.LedgerTally{}
		t.ledgers[res.ledger] = lt
	}
	lt.Runs++
	lt.Refused += res.refused
	lt.Accepted += res.ledgerAccepted
	lt.StalledRefused += res.stalls.Refused
	t.runs++
	t.accepted += res.accepted
	t.rejected += res.rejected
	t.ambiguous += res.ambiguous
	t.overlaps += len(res.overlaps)
	for _, o := range res.overlaps {
		t.maxOverlap = max(t.maxOverlap, o.Duration)
	}
	t.violations += len(res.violations)
	if len(res.violations) > 0 {
		t.failedRuns++
	}
	for _, v := range res.violations {
		t.found = append(t.found, fmt.Sprintf("run %d (schedule %s, faults %s): %s", res.sched.Run, res.sched.Hash(), kindList(res.faults), v))
	}
	if res.linear == string(porcupine.Unknown) {
		t.unknownLinear++
	}
	if t.kinds == nil {
		t.kinds = map[string]*kindTally{}
	}
	for k, n := range res.faults {
		kt := t.kinds[k]
		if kt == nil {
			kt = &kindTally{}
			t.kinds[k] = kt
		}
		kt.injected += n
		kt.runs++
		kt.accepted += res.ledgerAccepted
		kt.refused += res.refused
		kt.violations += len(res.violations)
	}
}

func (t *totals) print(elapsed time.Duration) {
	fmt.Printf("totals: runs %d in %v\n", t.runs, elapsed.Round(time.Second))
	fmt.Println("| fault kind | injected | runs with it | fenced writes accepted | refused | violations |")
	fmt.Println("| --- | --- | --- | --- | --- | --- |")
	for _, k := range sortedKeys(t.kinds) {
		kt := t.kinds[k]
		fmt.Printf("| %s | %d | %d | %d | %d | %d |\n", k, kt.injected, kt.runs, kt.accepted, kt.refused, kt.violations)
	}
	fmt.Printf("writes accepted %d rejected %d ambiguous %d\n", t.accepted, t.rejected, t.ambiguous)
	for _, name := range sortedKeys(t.ledgers) {
		l := t.ledgers[name]
		fmt.Printf("ledger %s: %d runs, the ledgers accepted %d writes and refused %d (stalled writes refused %d)\n", name, l.Runs, l.Accepted, l.Refused, l.StalledRefused)
	}
	fmt.Printf("overlaps measured %d (max %v); linearizability unknown (timeout) %d\n", t.overlaps, t.maxOverlap.Round(time.Millisecond), t.unknownLinear)
	// Repeated here so that the tail of a long log (all a CI summary may keep) names them.
	for _, f := range t.found {
		fmt.Printf("  VIOLATION %s\n", f)
	}
	fmt.Printf("violations: %d\n", t.violations)
}

// unexercised prints and counts, for a long run, every ledger whose fence refused nothing
// although its stall kind was among kinds (chaos.CheckExercised).
func (t *totals) unexercised(kinds []string) int {
	tallies := map[string]chaos.LedgerTally{}
	for name, l := range t.ledgers {
		tallies[name] = *l
	}
	vs := chaos.CheckExercised(tallies, kinds)
	for _, v := range vs {
		fmt.Printf("FAILED %s\n", v)
	}
	return len(vs)
}
