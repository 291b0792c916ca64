package main

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/lockwarden/lockwarden/test/chaos"
)

// gresult is what a global run reports.
type gresult struct {
	sched  chaos.Schedule
	faults map[string]int
	// accepted, rejected, ambiguous: the writes as the workers saw them; byCluster the
	// accepted ones per cluster; refused what the ledger itself refused.
	accepted, rejected, ambiguous int
	byCluster                     map[string]int
	refused                       int
	terms                         map[string][]int64 // the tokens each cluster's status claimed, in order
	overlaps                      []chaos.Overlap
	linear                        string
	failovers                     []failover
	gaps                          []time.Duration // between two clusters' pods leading (HandoverGaps), shortest first
	liveness                      []time.Duration
	violations                    []chaos.Violation
	saved                         string
	elapsed                       time.Duration
}

// failover is one measured takeover: from a fault on the holder cluster's manager to the
// other cluster's first accepted write.
type failover struct {
	Kind  string        `json:"kind"`
	From  string        `json:"from"`
	To    string        `json:"to"`
	Token int64         `json:"token"` // the new holder's token
	Took  time.Duration `json:"took"`  // 0 with Found false
	Found bool          `json:"found"` // false: the other cluster wrote nothing after the fault
	// Granted is when the shared etcd granted the other cluster (the harness's watch
	// received it), from the fault; 0 when it saw no such grant.
	Granted time.Duration `json:"granted,omitempty"`
}

// check runs every checker on the run's histories, across both clusters; a failing run is
// saved.
func (r *grun) check(outs []chaos.Outcome) *gresult {
	res := &gresult{sched: r.sched, faults: r.faults, byCluster: map[string]int{}, terms: map[string][]int64{}}
	var hs []chaos.WorkerHistory
	var obs [][]chaos.GlobalObs
	var vs []chaos.Violation
	for _, c := range r.clusters {
		chs := c.histories()
		hs = append(hs, chs...)
		o := c.observations()
		obs = append(obs, o)
		vs = append(vs, chaos.CheckGlobalTokens(o)...)
		for _, t := range chaos.GlobalTerms(o) {
			res.terms[c.name] = append(res.terms[c.name], t.Token)
		}
		for _, op := range chaos.LedgerOps(chs) {
			if op.Accepted && !op.Ambiguous {
				res.byCluster[c.name]++
			}
		}
	}
	vs = append(vs, chaos.CheckGlobalClaims(obs...)...)
	r.mu.Lock()
	shared := append([]chaos.GlobalEvent(nil), r.shared...)
	r.mu.Unlock()
	vs = append(vs, chaos.CheckGrantsTombstoned(shared)...)
	vs = append(vs, chaos.CheckClaimsGranted(shared, obs...)...)
	vs = append(vs, chaos.CheckLedger(outs)...)
	vs = append(vs, chaos.CheckIncarnations(hs)...)
	ops := chaos.LedgerOps(hs)
	res.accepted, res.rejected, res.ambiguous = countOps(ops)
	for _, o := range outs {
		if !o.Accepted {
			res.refused++
		}
	}
	lin, info, lvs := chaos.CheckLinearizable(ops, 30*time.Second)
	res.linear = string(lin)
	vs = append(vs, lvs...)
	var ivs []chaos.Interval
	for _, h := range hs {
		ivs = append(ivs, h.Intervals()...)
	}
	res.gaps = chaos.HandoverGaps(ivs, r.clusterOf)
	overlaps, ovs := chaos.Overlaps(ivs)
	res.overlaps = overlaps
	vs = append(vs, ovs...)
	vs = append(vs, chaos.CheckOverlaps(overlaps, 0)...) // both clusters' pods, one machine's clock
	r.mu.Lock()
	vs = append(vs, r.violations...)
	marks := append([]faultMark(nil), r.marks...)
	res.liveness = append(res.liveness, r.liveness...)
	r.mu.Unlock()
	res.failovers = r.failovers(hs, marks, shared)
	res.violations = vs
	if len(vs) > 0 || res.linear == string(porcupine.Unknown) {
		res.saved = r.save(hs, ivs, ops, obs, outs, overlaps, vs, info, marks, res.failovers, shared)
	}
	return res
}

// clusterOf names the cluster whose pod uid is, "" for none.
func (r *grun) clusterOf(uid string) string {
	for _, c := range r.clusters {
		if c.owns(uid) {
			return c.name
		}
	}
	return ""
}

// failovers measures, for every fault that took the holder cluster's manager out, the time
// to the other cluster's first accepted write after it.
func (r *grun) failovers(hs []chaos.WorkerHistory, marks []faultMark, shared []chaos.GlobalEvent) []failover {
	var out []failover
	for _, m := range marks {
		if !chaos.Failover(m.Kind) || m.Holder == "" || m.Skipped {
			continue
		}
		from := r.cluster(m.Holder)
		var to *gcluster
		for _, c := range r.clusters {
			if c != from {
				to = c
			}
		}
		fo := failover{Kind: m.Kind, From: from.name, To: to.name}
		if w, ok := chaos.FirstWrite(hs, m.At, to.owns); ok {
			fo.Took, fo.Token, fo.Found = time.Duration(w.Mono-m.At), w.Token, true
		}
		for _, e := range shared {
			if _, ok := e.Grant(); ok && e.Cluster == to.name && e.Mono > m.At {
				fo.Granted = time.Duration(e.Mono - m.At)
				break
			}
		}
		out = append(out, fo)
	}
	return out
}

// line is the run's one-line report.
func (res *gresult) line() string {
	var maxOverlap, live time.Duration
	for _, o := range res.overlaps {
		maxOverlap = max(maxOverlap, o.Duration)
	}
	for _, d := range res.liveness {
		live = max(live, d)
	}
	fos := "none measured"
	if len(res.failovers) > 0 {
		fos = ""
		for i, f := range res.failovers {
			if i > 0 {
				fos += ", "
			}
			if f.Found {
				fos += fmt.Sprintf("%.1fs after %s of %s (%s granted at %.1fs, wrote with token %d)", f.Took.Seconds(), f.Kind, f.From, f.To, f.Granted.Seconds(), f.Token)
			} else {
				fos += fmt.Sprintf("none after %s of %s (no write by %s after it)", f.Kind, f.From, f.To)
			}
		}
	}
	gap := "none"
	if len(res.gaps) > 0 {
		gap = fmt.Sprintf("%d, shortest %.1fs", len(res.gaps), res.gaps[0].Seconds())
	}
	t := globalTiming
	return fmt.Sprintf("global run %d seed %d schedule %s faults %s L %v D %v G %v writes accepted %d (east %d, west %d) rejected %d ambiguous %d ledger refused %d terms east %v west %v overlaps %d (max %v) handovers between clusters %s linearizable %s failover %s bound %v recovery max %v violations %d (%v)",
		res.sched.Run, res.sched.Seed, res.sched.Hash(), kindList(res.faults), t.Lease, t.LockDelay, t.Grant,
		res.accepted, res.byCluster["east"], res.byCluster["west"], res.rejected, res.ambiguous, res.refused,
		res.terms["east"], res.terms["west"], len(res.overlaps), maxOverlap.Round(time.Millisecond), gap, res.linear,
		fos, t.FailoverBound(), live.Round(time.Millisecond), len(res.violations), res.elapsed.Round(time.Second))
}

// globalSummary accumulates the runs' results.
type globalSummary struct {
	runs, violations int
	failovers        []time.Duration
	missing          int // failover faults after which the other cluster never wrote
	found            []string
}

func (s *globalSummary) add(res *gresult) {
	s.runs++
	s.violations += len(res.violations)
	for _, f := range res.failovers {
		if f.Found {
			s.failovers = append(s.failovers, f.Took)
		} else {
			s.missing++
		}
	}
	for _, v := range res.violations {
		s.found = append(s.found, fmt.Sprintf("run %d (schedule %s, faults %s): %s", res.sched.Run, res.sched.Hash(), kindList(res.faults), v))
	}
}

// print ends the output: the violations again (for the tail of a long log), then the
// summary line.
func (s *globalSummary) print(t chaos.GlobalTiming) {
	for _, f := range s.found {
		fmt.Printf("  VIOLATION %s\n", f)
	}
	p50, most := "-", "-"
	if len(s.failovers) > 0 {
		p50 = fmt.Sprintf("%.1f", chaos.Quantile(s.failovers, 0.5).Seconds())
		most = fmt.Sprintf("%.1f", chaos.Quantile(s.failovers, 1).Seconds())
	}
	fmt.Printf("failovers measured %d, without a takeover by the other cluster %d\n", len(s.failovers), s.missing)
	fmt.Printf("summary: runs %d violations %d failover_p50_s %s failover_max_s %s bound_s %g\n",
		s.runs, s.violations, p50, most, t.FailoverBound().Seconds())
}
