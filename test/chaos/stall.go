package chaos

import (
	"fmt"
	"slices"
	"sort"
)

// The stall kinds put the fence under test on purpose: random pauses almost never land
// between a worker's Valid() check and its write (NOTES.md: 49 runs, 3,111 accepted writes,
// none refused), which is the one moment a fencing token exists for. The harness arms the
// holder's stall hook, so that its next write waits right after Valid() said yes; ends the
// holder's term while it waits; waits for the next holder's first accepted write; and only
// then lets the stalled write go. The ledger must refuse it.

// StallOutcome is what became of the stalled writes in a run's histories.
type StallOutcome struct {
	Stalled  int // writes that waited in the stall hook
	Refused  int // of those, refused by the ledger (stale token)
	Accepted int // of those, accepted
	Lost     int // of those, without an answer (the process died, or no reply)
}

// Stalls counts the stalled writes of hs and how the ledger answered them.
func Stalls(hs []WorkerHistory) StallOutcome {
	var out StallOutcome
	for _, h := range hs {
		stalled := map[int]bool{}
		answered := map[int]bool{}
		for _, e := range h.Events {
			switch {
			case e.Kind == EvCall && e.Stalled:
				stalled[e.ID] = true
				out.Stalled++
			case e.Kind == EvReturn && stalled[e.ID] && !answered[e.ID]:
				answered[e.ID] = true
				switch e.Result {
				case ResultStale:
					out.Refused++
				case ResultOK:
					out.Accepted++
				default:
					out.Lost++
				}
			}
		}
		for id := range stalled {
			if !answered[id] {
				out.Lost++
			}
		}
	}
	return out
}

// CheckStalls fails a run that injected a stall kind injected times but shows no stalled
// write refused by the ledger: the fence was not exercised. (A stalled write the ledger
// accepted after a higher token is caught by CheckLedger and CheckLinearizable; one accepted
// because no other holder wrote meanwhile is no violation of the fence, but it is no refusal
// either.)
func CheckStalls(hs []WorkerHistory, injected int) []Violation {
	if injected == 0 {
		return nil
	}
	st := Stalls(hs)
	if st.Refused > 0 {
		return nil
	}
	return []Violation{{Checker: "stall", Detail: fmt.Sprintf(
		"%d stall faults injected, %d writes stalled between Valid() and the send, none refused by the ledger (%d accepted, %d without an answer): the fence was not exercised",
		injected, st.Stalled, st.Accepted, st.Lost)}}
}

// Ledgers: each run has a ledger of its own; their refusals are counted per workload.
const (
	LedgerPods   = "pods"   // the ledgers of the pod runs (chaosworker with pkg/leadership)
	LedgerEngine = "engine" // the ledgers of the engine runs (chaosworker with pkg/lease)
)

// StallKindOf is the stall kind that exercises the fence of a workload's ledgers.
func StallKindOf(ledger string) string {
	if ledger == LedgerEngine {
		return EngineStall
	}
	return WorkerStall
}

// LedgerTally is what the ledgers of one workload decided over the runs of a long run.
type LedgerTally struct {
	Runs           int // runs with a ledger of this workload
	Accepted       int // writes the ledgers accepted
	Refused        int // writes the ledgers refused (stale tokens, equal tokens of another writer)
	StalledRefused int // of those, stalled writes
}

// CheckExercised fails a long run in which the ledgers of a workload refused no write although
// that workload's stall kind was among the kinds drawn from: the fence was never exercised.
func CheckExercised(tallies map[string]LedgerTally, kinds []string) []Violation {
	names := make([]string, 0, len(tallies))
	for name := range tallies {
		names = append(names, name)
	}
	sort.Strings(names)
	var vs []Violation
	for _, name := range names {
		t := tallies[name]
		if t.Runs == 0 || t.Refused > 0 || !slices.Contains(kinds, StallKindOf(name)) {
			continue
		}
		vs = append(vs, Violation{Checker: "exercised", Detail: fmt.Sprintf(
			"the %s ledgers refused no write in %d runs (%d accepted), %s among the kinds: the fence was never exercised",
			name, t.Runs, t.Accepted, StallKindOf(name))})
	}
	return vs
}
