package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// The global mode (-global; make chaos-global): two clusters, east and west, each its own
// control plane (the harness's, and a second testenv.Env beside it) with one manager, contend
// for one scope Global lock over the shared 3-member etcd; their workers write to one ledger
// outside both clusters. Its runs are chaos.NewGlobalSchedule's.

// globalTiming is the global runs' lock: L = 6 s (the API's minimum for a Global lock),
// D = 2L = 12 s, G = L.
var globalTiming = chaos.GlobalTiming{Lease: 6 * time.Second, LockDelay: 12 * time.Second, Grant: 6 * time.Second}

// globalPods is each cluster's number of candidate pods: a second one lets a term end in the
// holder cluster go to a local candidate (R8) as well as to the other cluster.
const globalPods = 2

// globalHarness is what every global run shares: the harness (east's control plane, the
// shared etcd, the binaries) and west's control plane.
type globalHarness struct {
	h      *harness
	east   *harness // h itself
	west   *harness // a copy of h on west's control plane
	timing chaos.GlobalTiming
}

// mainGlobal is mainRun for -global.
func mainGlobal(ctx context.Context, o options) int {
	h := &harness{opts: o, t0: time.Now(), kinds: chaos.GlobalKinds,
		timing: chaos.Timing{Lease: globalTiming.Lease, LockDelay: globalTiming.LockDelay, ElectionTTL: 5 * time.Second}}
	g := &globalHarness{h: h, east: h, timing: globalTiming}
	err := h.start(ctx)
	if err == nil {
		err = g.startWest()
	}
	defer g.close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 1
	}
	fmt.Printf("chaos: global mode: clusters east and west (a control plane each, one manager each) on the shared etcd; L %v, D %v, G %v; failover bound G + D + 1 s = %v; liveness bound after a heal %v\n",
		g.timing.Lease, g.timing.LockDelay, g.timing.Grant, g.timing.FailoverBound(), g.livenessBound())
	var sum globalSummary
	errCount := 0
	for i := o.first; i < o.first+o.runs && ctx.Err() == nil; i++ {
		if err := h.ensureEtcd(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
			errCount++
			break
		}
		g.west.etcd = h.etcd // a replaced cluster is both clusters'
		sched := chaos.NewGlobalSchedule(o.seed, i, g.timing)
		r := newGlobalRun(g, sched)
		res, err := r.execute(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			errCount++
			fmt.Printf("global run %d seed %d schedule %s faults %s: harness error: %v (logs: %s; replay: %s)\n",
				i, o.seed, sched.Hash(), kindList(sched.Counts()), err, r.dir, g.replay(sched))
			h.opts.keep = true
			continue
		}
		sum.add(res)
		fmt.Println(res.line())
		for _, v := range res.violations {
			fmt.Printf("  VIOLATION %s\n", v)
		}
		if res.saved != "" {
			fmt.Printf("  saved %s; replay: %s\n", res.saved, g.replay(sched))
		}
	}
	sum.print(g.timing)
	if errCount > 0 {
		fmt.Printf("harness errors: %d\n", errCount)
	}
	if sum.violations > 0 || errCount > 0 {
		return 1
	}
	return 0
}

// livenessBound is how soon after a heal some cluster's worker must write: G + D + 4 s (a
// takeover's G + D + 1 s, and the rounds and reads of the new holder).
func (g *globalHarness) livenessBound() time.Duration {
	return g.timing.Grant + g.timing.LockDelay + 4*time.Second
}

// replay is the command that runs sched again.
func (g *globalHarness) replay(s chaos.Schedule) string {
	return fmt.Sprintf("go run ./test/chaos/cmd/chaos -global -seed %d -first %d -runs 1", s.Seed, s.Run)
}

// startWest starts west's control plane and makes west's harness: h's binaries, etcd and
// scratch directory, west's API server.
func (g *globalHarness) startWest() error {
	cp, err := testenv.Start()
	if err != nil {
		return fmt.Errorf("west's control plane: %w", err)
	}
	w := *g.h
	w.cp = cp
	g.west = &w
	w.kubeconfig = filepath.Join(g.h.dir, "west.kubeconfig")
	if err := cp.Kubeconfig(w.kubeconfig); err != nil {
		return err
	}
	w.k8s, w.cs, err = clients(*cp.Config)
	return err
}

// close stops west's control plane, then what h.close stops (the etcd cluster, east's control
// plane, the scratch directory).
func (g *globalHarness) close() {
	if g.west != nil && g.west.cp != nil {
		if err := g.west.cp.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "chaos:", err)
		}
	}
	g.h.close()
}
