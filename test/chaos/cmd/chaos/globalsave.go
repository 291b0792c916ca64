package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/anishathalye/porcupine"

	"github.com/lockwarden/lockwarden/test/chaos"
)

// save writes a failing global run's schedule, histories, both clusters' statuses, the
// ledger's decisions, the timeline and the process logs of both clusters under the out dir.
func (r *grun) save(hs []chaos.WorkerHistory, ivs []chaos.Interval, ops []chaos.LedgerOp, obs [][]chaos.GlobalObs, outs []chaos.Outcome,
	overlaps []chaos.Overlap, vs []chaos.Violation, info porcupine.LinearizationInfo, marks []faultMark, fos []failover, shared []chaos.GlobalEvent) string {
	dir := filepath.Join(r.g.h.outDir, fmt.Sprintf("global-seed-%d-run-%d", r.sched.Seed, r.sched.Run))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ""
	}
	write := func(name string, v any) {
		if b, err := json.MarshalIndent(v, "", "  "); err == nil {
			_ = os.WriteFile(filepath.Join(dir, name), b, 0o644)
		}
	}
	write("schedule.json", r.sched)
	write("worker-histories.json", hs)
	write("intervals.json", ivs)
	write("ledger-ops.json", ops)
	write("ledger-outcomes.json", outs)
	for i, c := range r.clusters {
		write("status-"+c.name+".json", obs[i])
		write("terms-"+c.name+".json", chaos.GlobalTerms(obs[i]))
	}
	write("overlaps.json", overlaps)
	write("violations.json", vs)
	write("faults.json", marks)
	write("failovers.json", fos)
	write("shared-etcd.json", shared)
	_ = chaos.Visualize(info, filepath.Join(dir, "porcupine.html"))
	r.mu.Lock()
	notes := append([]string(nil), r.notes...)
	r.mu.Unlock()
	writeReadme(dir, fmt.Sprintf("global seed %d run %d schedule %s\n%s\n\nreplay: %s", r.sched.Seed, r.sched.Run, r.sched.Hash(), r.sched, r.g.replay(r.sched)),
		vs, notes, r.dir)
	copyLogs(r.dir, dir, "")
	for _, c := range r.clusters {
		copyLogs(c.r.dir, dir, c.name+"-")
	}
	return dir
}
