// Package chaos holds the histories and checkers of lockwarden's fault-injection suite, and
// the seeded fault schedules that drive it. The harness that runs real processes and faults
// is the program in cmd/chaos (`make chaos`); its worker is cmd/chaosworker. Only the
// checkers' and schedules' unit tests run under `go test`: they start no process.
//
// The checkers, run on every history:
//
//  1. CheckTokens: the published grants of a lock carry strictly increasing tokens, and
//     status.fencingToken, maxFencingToken and controllerEpoch never decrease.
//  2. CheckLedger: the ledger never accepted a token below one it had accepted, nor one
//     token from two writers.
//  3. CheckLinearizable: the ledger's history as its clients saw it is linearizable
//     (porcupine), a write without a reply counting as either applied or not.
//  4. Overlaps: overlap of the workers' leadership intervals, measured on CLOCK_MONOTONIC;
//     two workers leading with one token is a violation.
//  5. CheckLiveness: after the faults heal, the lock has a holder that writes within a bound.
//  6. CheckOverlaps: no two pods' leadership intervals overlap beyond a tolerance (0 in the
//     harness: on one machine's clock the controller's waits leave no overlap at all).
//  7. CheckHandoffs: a term that ended without Releasing and the delay was ended on a claim
//     of attested termination; the harness, which runs the processes, checks the claim: no
//     process of the holder's pod ran at that moment or was started again later.
//  8. For a lock of N slots (spec.slots), the checkers above run on each slot's part of the
//     histories, status and ledgers (BySlot, ObserveSlots: slots.go), and CheckHolders counts,
//     from the pods' own validity intervals whatever slot they claim, that no more than N pods
//     ever held valid terms at once; CheckOneSlotPerPod that no pod was valid in two slots at
//     once; CheckSlotStalls that every slot's ledger refused a stalled write (holders.go).
//
// The global mode (`make chaos-global SEED= RUNS=`, `chaos -global`; not in chaos-ci: a run
// takes minutes) runs scope Global locks (issue 21, docs/global.md): two clusters, east and
// west, each its own control plane and one manager (--cluster-name, a shared
// --global-etcd-prefix, an etcd prefix and per-member proxies of its own), contend for one
// spec.globalName (L = 6 s, D = 12 s, G = L) on the shared etcd, and every worker of both
// clusters writes to ONE ledger outside both. NewGlobalSchedule draws one or two faults a run
// (global.go): kill the holder cluster's manager, cut it from etcd past G + D, delete the
// holder pod, kill an etcd member, SIGSTOP the holder's worker past L + D. Checked:
// CheckLedger and CheckLinearizable on the shared ledger, Overlaps and CheckOverlaps
// (tolerance 0) on the workers of both clusters together, CheckGlobalTokens on each cluster's
// statuses (tokens only grow, the round rules, no holderUID), CheckGlobalClaims (no token
// claimed by two clusters), and against the harness's watch of the shared etcd's keys of the
// run's global name (globaletcd.go) CheckClaimsGranted (every claim is a grant etcd made to
// that cluster and pod) and CheckGrantsTombstoned (R6: every grant put the tombstone, which is
// never deleted), CheckLiveness after each heal (G + D + 4 s; after a fault that ends the
// term, a write under a newer token, or after a short manager kill the same term's rounds
// going on). Measured: the failover after a manager kill or cut, from the fault to the other
// cluster's first accepted write (FirstWrite), against docs/global.md's bound G + D + 1 s, and
// how far apart the two clusters' pods led at each handover (HandoverGaps); the run ends with
// a "summary:" line (runs, violations, failover p50 and max, bound).
package chaos
