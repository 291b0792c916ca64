package main

import (
	"fmt"
	"math"
	"strings"
	"time"

	"gonum.org/v1/plot/plotter"
)

// grantRate is the row's grants per second while granting: the locks over the time from the
// first lock seen Held to the last (manager start and cache sync excluded, as the raw rate
// excludes them); 0 when not every lock was Held.
func (x *scaleResult) grantRate() float64 {
	d := x.allHeld - x.firstHeld
	if x.allHeld == 0 || d <= 0 {
		return 0
	}
	return float64(x.n) / d.Seconds()
}

// rawFraction is the grant rate over the raw status-write rate of the same stack.
func (x *scaleResult) rawFraction() float64 {
	if x.raw == nil || x.raw.mean() == 0 {
		return 0
	}
	return x.grantRate() / x.raw.mean()
}

// writesPerLock is the DistributedLock writes per new lock.
func (x *scaleResult) writesPerLock() float64 {
	if x.cost == nil {
		return math.NaN()
	}
	return x.cost.lockWritesTotal() / float64(x.n)
}

// growth is the time to every lock Held over the first row's.
func growth(results []*scaleResult, x *scaleResult) float64 {
	a := results[0]
	if a.allHeld == 0 || x.allHeld == 0 {
		return math.NaN()
	}
	return ratio(x.allHeld, a.allHeld)
}

// rawGrowth is how much longer the raw status writes of x's locks took than the first
// row's: the API server's own growth, which our growth is read against.
func rawGrowth(results []*scaleResult, x *scaleResult) float64 {
	a := results[0]
	if a.raw == nil || x.raw == nil || x.raw.mean() == 0 || a.raw.mean() == 0 {
		return math.NaN()
	}
	return (float64(x.n) / x.raw.mean()) / (float64(a.n) / a.raw.mean())
}

// thirdRates is the grant rate over each third of the locks (from the first Held): a rate
// that falls as more locks are held is a per-lock cost that grows with the count.
func (x *scaleResult) thirdRates() string {
	if x.allHeld == 0 {
		return "n/a"
	}
	from := x.thirds[2].Add(x.firstHeld - x.allHeld) // the first lock Held
	var parts []string
	for _, t := range x.thirds {
		if d := t.Sub(from).Seconds(); d > 0 {
			parts = append(parts, fmt.Sprintf("%.0f", float64(x.n)/3/d))
		} else {
			parts = append(parts, "n/a")
		}
		from = t
	}
	return strings.Join(parts, " / ")
}

func f2(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", x)
}

// summaryLine is the one line the scale section ends with, from its largest row.
func summaryLine(results []*scaleResult) string {
	z := results[len(results)-1]
	held := "n/a"
	if z.allHeld > 0 {
		held = fmt.Sprintf("%.1f", z.allHeld.Seconds())
	}
	return fmt.Sprintf("summary: locks10k_s=%s raw_fraction=%s growth=%s writes_per_lock=%s rss10k_mib=%.0f",
		held, f2(z.rawFraction()), f2(growth(results, z)), f2(z.writesPerLock()), float64(z.rssPeak)/(1<<20))
}

func (r *report) scaleSection(results []*scaleResult) error {
	var b strings.Builder
	reconciles := "its default (16)"
	if r.o.reconciles > 0 {
		reconciles = fmt.Sprint(r.o.reconciles)
	}
	policy := "config/policy installed (the finalizer MutatingAdmissionPolicy and the holder-release ValidatingAdmissionPolicy): every lock is created with its finalizer"
	if !r.o.finalizerPolicy {
		policy = "only the holder-release ValidatingAdmissionPolicy installed (-finalizer-policy=false): the manager sets each lock's finalizer itself"
	}
	b.WriteString(r.header(
		fmt.Sprintf("a fresh control plane per row; a baseline bin/lockwarden is read on the empty cluster and again with 3N Ready pods (3 per lock) created and cached, then stopped (the pods' creation is slower with it running); then the **raw status-write rate**: N DistributedLocks in a namespace of their own, no manager running, the status of each written once (an update with the resourceVersion of the last write, a first grant's status) at each of %v concurrent writers, the best of them counting; those locks are deleted; after the run (manager stopped) the row's own locks are written once more at that concurrency, and our rate is read against the mean of the two, since a shared machine's load drifts", rawConcurrency),
		policy,
		fmt.Sprintf("N DistributedLocks (leaseDurationSeconds 15, OldestReady) are created with no manager running; then the measured bin/lockwarden starts (--max-concurrent-reconciles %s) and the clock runs from its start to the moment the bench's watch has seen every lock with phase Held (given up after %v); **our rate** is N over the time from the first lock seen Held to the last (startup excluded, as from the raw rate)", reconciles, r.o.scaleTimeout),
		"writes and reads per new lock from kube-apiserver's apiserver_request_total, lockwarden's etcd requests from its gRPC metrics, CPU from each process's process_cpu_seconds_total, all between the manager's start and 5 s after the last lock was Held (the manager's CPU counts from its start)",
		"no pkg/leadership electors run here (the controller needs only the pods), so the pods' confirming reads per held lock are those measured in section 4 (3 candidates x 1 per L/3 = 0.6/s at L = 15 s)",
		"after that, a steady-state window: API writes, lockwarden's etcd traffic, the manager's reconciles; reconcile p99 from the manager's controller_runtime_reconcile_time_seconds over the whole run; RSS from /proc/<pid>/status of the manager (VmRSS at the end, VmHWM peak)",
	))
	var grantRows, steadyRows [][]string
	goalHeld, goalRSS, goalWrites, goalRaw, goalPerLock := true, true, true, true, true
	var names []string
	var curves []plotter.XYs
	found, exitedAt10k := false, false
	for _, x := range results {
		held := seconds(x.allHeld)
		if x.allHeld == 0 {
			held = fmt.Sprintf("not reached: %d of %d after %v", x.heldAtEnd, x.n, r.o.scaleTimeout)
		}
		names = append(names, fmt.Sprintf("%d locks", x.n))
		curves = append(curves, fractionCurve(x.curve, x.n))
		raw := fmt.Sprintf("%.0f (%.0f before, %.0f after; at %d)", x.raw.mean(), x.raw.rate, x.raw.after, x.raw.concurrency)
		if x.exited != "" {
			grantRows = append(grantRows, []string{fmt.Sprint(x.n), seconds(x.setup), seconds(x.firstHeld), held, raw, "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a (exited)"})
			steadyRows = append(steadyRows, []string{fmt.Sprint(x.n), "n/a", "n/a", "n/a", "n/a (exited)", "n/a", "n/a", "n/a", "n/a"})
			if x.n >= 10000 {
				found, goalHeld, exitedAt10k = true, false, true
			}
			continue
		}
		c, n := x.cost, float64(x.n)
		cpu := fmt.Sprintf("%.2f / %.2f / %.2f", 1000*c.cpu["kube-apiserver"]/n, 1000*c.cpu["manager"]/n, 1000*c.cpu["lockwarden etcd"]/n)
		grantRows = append(grantRows, []string{
			fmt.Sprint(x.n), seconds(x.setup), seconds(x.firstHeld), held, raw,
			fmt.Sprintf("%.0f", x.grantRate()), f2(x.rawFraction()),
			f2(x.writesPerLock()), f2(c.lockReads / n), f2(c.events / n), f2(c.etcd["Txn"] / n), cpu, f2(growth(results, x)),
			f2(growth(results, x) / rawGrowth(results, x)), x.thirdRates(),
		})
		p99 := "n/a"
		if !math.IsNaN(x.reconcileP99) {
			p99 = ms(time.Duration(x.reconcileP99 * float64(time.Second)))
		}
		w := x.steady
		etcdTotal := total(w.lwEtcd)
		steadyRows = append(steadyRows, []string{
			fmt.Sprint(x.n), p99, fmt.Sprintf("%.0f", x.reconcileRate), fmt.Sprintf("%.0f", x.reconcileErrs),
			fmt.Sprintf("%.0f / %.0f", float64(x.rss)/(1<<20), float64(x.rssPeak)/(1<<20)),
			fmt.Sprintf("%.2f", w.writes()), fmt.Sprintf("%.2f", w.keepalives), fmt.Sprintf("%.0f", etcdTotal),
			fmt.Sprintf("%.2f", etcdTotal/n),
		})
		if x.n >= 10000 {
			found = true
			goalHeld = goalHeld && x.allHeld > 0 && x.allHeld <= time.Minute
			goalRSS = goalRSS && x.rssPeak < 1<<30
			goalWrites = goalWrites && w.writes() < 1
			goalRaw = goalRaw && x.rawFraction() >= 0.7
			goalPerLock = goalPerLock && x.writesPerLock() <= 1.01 // 1 per lock, give or take a rare retried conflict
		}
	}
	b.WriteString(table([]string{"locks", "setup: pods+locks created (s)", "manager start -> first Held (s)", "manager start -> all Held (s)",
		"raw status writes/s: mean (before, after; at concurrency)", "our grants/s (first -> all Held)", "ours / raw", "DistributedLock writes per new lock",
		"uncached lock GETs per new lock", "Events per new lock", "lockwarden etcd Txn per new lock", "CPU ms per new lock: kube-apiserver / manager / lockwarden etcd", "time vs the first row",
		"that over the raw writes' own growth", "grants/s by third of the locks"}, grantRows))
	for _, x := range results {
		if x.cost != nil {
			fmt.Fprintf(&b, "- %d locks, per new lock: %s; raw status writes/s by concurrency: %s (kube-apiserver CPU per raw write at %d: %.2f ms)\n",
				x.n, x.cost.describe(x.n), rawLevels(x.raw), x.raw.concurrency, 1000*x.raw.apiCPU)
		}
	}
	b.WriteString("\nSteady state, after every lock was Held:\n\n")
	b.WriteString(table([]string{"locks", "reconcile p99 (ms)", "reconciles/s, steady", "reconcile errors", "manager RSS MiB (now / peak)", "API writes/s, steady", "etcd keepalives/s", "lockwarden etcd requests/s, steady", "etcd requests/s per held lock"}, steadyRows))
	if err := linePlot(r.o.img, "scale.png", "Scale: locks Held after the manager starts", "seconds since the manager started", "fraction of locks Held", names, curves); err != nil {
		return err
	}
	b.WriteString(footprintTables(results))
	b.WriteString(r.imgRef("scale.png", "fraction of locks held over time"))
	for _, x := range results {
		if x.exited != "" {
			fmt.Fprintf(&b, "- %d locks: **the manager exited during the run**, %d locks held; its last log line: `%s`\n", x.n, x.heldAtEnd, x.exited)
			continue
		}
		var parts []string
		for _, k := range sortedKeys(x.steady.lwEtcd) {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, x.steady.lwEtcd[k]))
		}
		fmt.Fprintf(&b, "- %d locks, lockwarden's etcd by gRPC method in the steady window (per second): %s\n", x.n, strings.Join(parts, ", "))
	}
	b.WriteString("\n")
	if found {
		if exitedAt10k {
			fmt.Fprintf(&b, "Goals at 10,000 locks: all held within 60 s: %s (the manager exited); the rest: not measured (the manager exited).\n\n", metGoal(goalHeld))
		} else {
			fmt.Fprintf(&b, "Goals at 10,000 locks: all held within 60 s: %s; at least 0.7 x the raw status-write rate: %s; 1 DistributedLock write per new lock: %s; RSS under 1 GiB: %s; steady-state API writes ~0 (under 1/s): %s.\n\n",
				metGoal(goalHeld), metGoal(goalRaw), metGoal(goalPerLock), metGoal(goalRSS), metGoal(goalWrites))
		}
	} else {
		b.WriteString("Goals at 10,000 locks: not measured in this run (smaller counts only).\n\n")
	}
	if len(results) >= 2 {
		a, z := results[0], results[len(results)-1]
		if a.allHeld > 0 && z.allHeld > 0 {
			g := growth(results, z)
			fmt.Fprintf(&b, "Growth: %d locks took %s x as long as %d locks to be held (%s x the locks; goal: at most 11 x for 10 x): %s. "+
				"The raw status writes of the same rows took %s x as long (the API server's own rate at each row's size, on this machine at that time); ours over that: %s x.\n\n",
				z.n, fmtRatio(g), a.n, fmtRatio(float64(z.n)/float64(a.n)), metGoal(g <= 1.1*float64(z.n)/float64(a.n)),
				f2(rawGrowth(results, z)), f2(g/rawGrowth(results, z)))
		}
	}
	for _, x := range results {
		if p := x.profiles; p != nil {
			fmt.Fprintf(&b, "CPU profiles over %v while %d locks were being granted (from the first lock Held; `go tool pprof -top -cum`, the first 25 lines)", p.window, x.n)
			if p.err != nil {
				fmt.Fprintf(&b, "; capture failed in part: %v", p.err)
			}
			b.WriteString(":\n\n")
			for _, part := range []struct{ what, file, top string }{{"kube-apiserver", p.apiserver, p.apiserverTop}, {"lockwarden manager", p.manager, p.mgrTop}} {
				if part.top == "" {
					continue
				}
				fmt.Fprintf(&b, "<details><summary>%s (%s)</summary>\n\n```\n%s\n```\n</details>\n\n", part.what, part.file, part.top)
			}
		}
	}
	b.WriteString("What limits the number: a new lock costs one write of the DistributedLock where the finalizer policy runs (the status with the grant; " +
		"two without it: the finalizer first), one linearizable etcd read and a share of one guarded etcd transaction (grants that overlap go out " +
		"together, docs/scale.md), and at most one Event (grant Events are rate limited, controllers/grantevents.go). The raw rate above is " +
		"what the same API server gives a client that does nothing but those status writes; the ratio is how much of it the manager's own " +
		"work leaves. kube-apiserver, its etcd, lockwarden's etcd, the manager and this bench share 2 cores: the CPU per new lock says which " +
		"of them pays. In steady state the etcd requests per held lock show how often held locks are reconciled again (design: only the " +
		"controller-wide keepalive, i.e. ~0 per lock).\n\n")
	line := summaryLine(results)
	fmt.Fprintf(&b, "```\n%s\n```\n", line)
	r.summary = line
	r.add(5, b.String())
	return nil
}

// rawLevels lists the raw rate at every concurrency measured.
func rawLevels(x *rawResult) string {
	var parts []string
	for _, c := range rawConcurrency {
		parts = append(parts, fmt.Sprintf("%d: %.0f", c, x.byLevel[c]))
	}
	return strings.Join(parts, ", ")
}
