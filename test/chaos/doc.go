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
package chaos
