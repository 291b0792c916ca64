package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"time"
)

// footprint is what the manager and lockwarden's etcd hold at one moment: the cost of
// holding locks and caching pods that grows with their number, unlike the request rates.
type footprint struct {
	watchers   float64        // lockwarden's etcd: etcd_debugging_mvcc_watcher_total (every client's watches)
	streams    float64        // lockwarden's etcd: etcd_debugging_mvcc_watch_stream_total
	goroutines float64        // the manager's go_goroutines
	rss        int64          // the manager's VmRSS, before the forced GC
	heap       float64        // the manager's go_memstats_heap_alloc_bytes right after a forced GC: live heap
	byStart    map[string]int // the manager's goroutines by the function each started in
}

// scaleFootprints are the three readings of one scale row.
type scaleFootprints struct {
	empty footprint // a manager on an empty cluster: active, no pods, no locks
	pods  footprint // the same manager once the 3N pods exist (cached), still no locks
	held  footprint // the measured manager with every lock Held, after the steady window
}

// readFootprint reads lockwarden's etcd watch gauges and the running manager's goroutines
// (count and dump) and memory. With -logs the dump is also saved as goroutines-<name>.txt. It forces a GC in the manager (/debug/pprof/heap?gc=1) so that the heap
// reading is the live heap, not garbage waiting for the next cycle; the goroutines and RSS
// are read first, so that the reading's own requests and the collection do not change them.
func readFootprint(ctx context.Context, s *stack, name string) (footprint, error) {
	var f footprint
	em, err := s.etcdMetrics(ctx)
	if err != nil {
		return f, err
	}
	f.watchers = sum(em, "etcd_debugging_mvcc_watcher_total", nil)
	f.streams = sum(em, "etcd_debugging_mvcc_watch_stream_total", nil)
	mm, err := s.managerMetrics(ctx)
	if err != nil {
		return f, err
	}
	if _, ok := mm["go_goroutines"]; !ok {
		return f, fmt.Errorf("read manager goroutines: no go_goroutines on its /metrics")
	}
	f.goroutines = sum(mm, "go_goroutines", nil)
	if f.rss, _, err = rss(s.managerPID()); err != nil {
		return f, err
	}
	dump, err := goroutineDump(ctx, s.mgr.pprofAddr)
	if err != nil {
		return f, err
	}
	f.byStart = goroutinesByStart(dump)
	if err := saveDump(name, dump); err != nil {
		return f, err
	}
	if err := forceGC(ctx, s.mgr.pprofAddr); err != nil {
		return f, err
	}
	if mm, err = s.managerMetrics(ctx); err != nil {
		return f, err
	}
	if _, ok := mm["go_memstats_heap_alloc_bytes"]; !ok {
		return f, fmt.Errorf("read manager heap: no go_memstats_heap_alloc_bytes on its /metrics")
	}
	f.heap = sum(mm, "go_memstats_heap_alloc_bytes", nil)
	return f, nil
}

// forceGC asks the manager's pprof endpoint for a heap profile with gc=1, which runs a
// garbage collection first (net/http/pprof); the profile itself is discarded.
func forceGC(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return fmt.Errorf("force manager GC: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("force manager GC: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("force manager GC: pprof heap: %s", resp.Status)
	}
	return nil
}

// perUnit is (after - before) / units, NaN without units.
func perUnit(after, before float64, units int) float64 {
	if units <= 0 {
		return math.NaN()
	}
	return (after - before) / float64(units)
}

// watchSlack is how many etcd watches above the empty manager's a row may show and still
// count as "a constant number": a waiter's predecessor watch or a reconnecting stream may be
// open at the moment of the reading. A watch per lock would show 1,000 or more.
const watchSlack = 2

// watchesConstant decides the goal "a constant number of etcd watches in all, not one per
// lock": every row's watches with all locks held are within watchSlack of its empty
// manager's, and of each other's. Rows whose manager exited (held is nil) fail it.
func watchesConstant(rows []watchRow) bool {
	if len(rows) == 0 {
		return false
	}
	lo, hi := rows[0].held, rows[0].held
	for _, r := range rows {
		if r.held-r.empty > watchSlack {
			return false
		}
		lo, hi = min(lo, r.held), max(hi, r.held)
	}
	return hi-lo <= watchSlack
}

// watchRow is the etcd watcher gauge of one row: empty manager and all locks held.
type watchRow struct{ empty, held float64 }

// footprintTables renders the watches/goroutines table, the memory table and the lines
// that say what they mean, for the rows whose manager did not exit.
func footprintTables(results []*scaleResult) string {
	var b strings.Builder
	var wrows, mrows [][]string
	var decided []watchRow
	for _, x := range results {
		if x.exited != "" || x.foot == nil {
			continue
		}
		e, p, h := x.foot.empty, x.foot.pods, x.foot.held
		pods := x.n * candidatesPerLock
		decided = append(decided, watchRow{empty: e.watchers, held: h.watchers})
		wrows = append(wrows, []string{
			fmt.Sprint(x.n), fmt.Sprint(x.heldAtEnd),
			fmt.Sprintf("%.0f / %.0f / %.0f", e.watchers, p.watchers, h.watchers),
			fmt.Sprintf("%.0f / %.0f / %.0f", e.streams, p.streams, h.streams),
			fmt.Sprintf("%.4f", perUnit(h.watchers, e.watchers, x.heldAtEnd)),
			fmt.Sprintf("%.0f / %.0f / %.0f", e.goroutines, p.goroutines, h.goroutines),
			fmt.Sprintf("%.4f", perUnit(h.goroutines, e.goroutines, x.heldAtEnd)),
		})
		mib := func(v float64) string { return fmt.Sprintf("%.0f", v/(1<<20)) }
		mrows = append(mrows, []string{
			fmt.Sprint(x.n), fmt.Sprint(pods),
			fmt.Sprintf("%s / %s / %s", mib(float64(e.rss)), mib(float64(p.rss)), mib(float64(h.rss))),
			fmt.Sprintf("%s / %s / %s", mib(e.heap), mib(p.heap), mib(h.heap)),
			mib(perUnit(float64(p.rss), float64(e.rss), pods) * 10000),
			mib(perUnit(p.heap, e.heap, pods) * 10000),
			fmt.Sprintf("%.1f", perUnit(h.heap, p.heap, x.heldAtEnd)/(1<<10)),
		})
	}
	if len(wrows) == 0 {
		return "Watches, goroutines and memory: not measured in this run (no row completed).\n\n"
	}
	b.WriteString("Watches and goroutines (readings: empty manager / 3N pods cached, no locks / every lock Held, after the steady window; per held lock = (all Held - empty) / locks Held):\n\n")
	b.WriteString(table([]string{"locks", "locks Held", "lockwarden etcd watchers", "etcd watch streams", "watchers per held lock", "manager goroutines", "goroutines per held lock"}, wrows))
	for _, x := range results {
		if x.exited != "" || x.foot == nil {
			continue
		}
		added := goroutinesAdded(x.foot.empty.byStart, x.foot.held.byStart)
		if len(added) == 0 {
			added = []string{"none"}
		}
		fmt.Fprintf(&b, "- %d locks, the manager's goroutines all Held vs empty, by the function they started in: %s\n", x.n, strings.Join(added, ", "))
	}
	b.WriteString("\n")
	b.WriteString("Memory of the manager (same three readings; RSS is VmRSS; live heap is go_memstats_heap_alloc_bytes right after a forced GC):\n\n")
	b.WriteString(table([]string{"locks", "pods", "RSS MiB", "live heap MiB", "RSS MiB per 10,000 pods", "live heap MiB per 10,000 pods", "live heap KiB per held lock"}, mrows))
	fmt.Fprintf(&b, "Goal: a constant number of etcd watches in all, not one per lock (every row within %d of its empty manager's and of the other rows'): %s.\n\n", watchSlack, metGoal(watchesConstant(decided)))
	b.WriteString("How these are read: the row's control plane first runs one bin/lockwarden on the empty cluster (active, 0 pods, 0 locks) " +
		"and reads it after 5-10 s (\"empty\"); the 3N pods are then created while it runs, and it is read again 10-20 s after the last one " +
		"(\"pods cached\": its pod cache holds them, it has no locks to reconcile); it is stopped, the N locks are created and the measured " +
		"manager starts, and its reading (\"all Held\") comes after the steady window. Each reading takes lockwarden's etcd " +
		"etcd_debugging_mvcc_watcher_total and watch_stream_total (every watch on that etcd: the manager's election and lock watches; " +
		"the bench opens none there), then the manager's go_goroutines and VmRSS (/proc/<pid>/status), then forces a GC " +
		"(/debug/pprof/heap?gc=1) and takes go_memstats_heap_alloc_bytes. Memory per 10,000 pods is (pods cached - empty) / 3N x 10,000: " +
		"the pods in the manager's cache (managedFields stripped) and its indexes, without locks. RSS also keeps heap the Go runtime has " +
		"not yet returned to the OS, so the live heap is the steadier number. Per held lock = (all Held - pods cached) / locks Held " +
		"(the lock objects in the cache and the controller's per-lock state; the measured manager listed everything at start, the " +
		"first one grew by watch events). With --watch-namespaces only the listed namespaces' pods and locks are cached.\n\n")
	return b.String()
}
