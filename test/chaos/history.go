package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
)

// Worker event kinds, one JSON object per line in a worker's history file.
const (
	// EvStart: OnStartedLeading was called with Token at Mono.
	EvStart = "start"
	// EvEnd: the worker stopped acting on Token at Mono (its term ended, Valid() turned
	// false, or the ledger refused the token).
	EvEnd = "end"
	// EvCall: the worker found Valid() true with deadline Until and sends write ID.
	EvCall = "call"
	// EvReturn: write ID returned at Mono with Result (and the ledger's Highest).
	EvReturn = "ret"
	// EvWriter: the first line of a history: the writer ID (Writer) the process presents
	// with its tokens, "<pod UID>/<incarnation>" (pkg/fence/writer).
	EvWriter = "writer"
	// EvAbandon: the process abandoned Token at Mono (Elector.Abandon): the ledger refused it
	// for that very token, which another writer (the pod's previous process) presented first.
	EvAbandon = "abandon"
)

// Write results.
const (
	ResultOK    = "ok"    // the ledger accepted it
	ResultStale = "stale" // the ledger refused the token (409)
	ResultError = "error" // no answer (timeout, reset): it may or may not have been applied
)

// Event is one line of a worker's history. Mono and Until are CLOCK_MONOTONIC nanoseconds,
// comparable across the processes of one machine.
type Event struct {
	Kind    string `json:"k"`
	Token   int64  `json:"tok"`
	Mono    int64  `json:"m"`
	Until   int64  `json:"u,omitempty"`
	ID      int    `json:"id,omitempty"`
	Op      string `json:"op,omitempty"` // fence or append
	Result  string `json:"res,omitempty"`
	Highest int64  `json:"hi,omitempty"`
	Writer  string `json:"w,omitempty"`  // EvWriter; EvStart: the term's writer, when it has its own
	Stalled bool   `json:"st,omitempty"` // EvCall: the write waited in the stall hook between its Valid() check and its call
	// Slot is the lock slot of the term the event belongs to (spec.slots > 1; 0 for a
	// one-slot lock): every event of a term but EvWriter carries it, so that a pod's terms in
	// two slots, each written to its slot's own ledger, are never read as one.
	Slot int32 `json:"sl,omitempty"`
}

// WorkerHistory is everything one worker process recorded. A pod played by several
// processes over a run (never at once) has one history per process.
type WorkerHistory struct {
	Pod    string  `json:"pod"`
	UID    string  `json:"uid"`
	Events []Event `json:"events"`
	// Exited is when the process exited (CLOCK_MONOTONIC ns, as its parent saw it), 0 if
	// unknown: no term outlives its process.
	Exited int64 `json:"exited,omitempty"`
}

// ReadEvents parses a history file; a torn last line (the process was killed while writing
// it) is ignored.
func ReadEvents(r io.Reader) ([]Event, error) {
	var out []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // torn write of a killed process
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	return out, nil
}

// Writer is the writer ID the process presented (its EvWriter event), or its pod UID for a
// history without one.
func (h WorkerHistory) Writer() string {
	for _, e := range h.Events {
		if e.Kind == EvWriter && e.Writer != "" {
			return e.Writer
		}
	}
	return h.UID
}

// Interval is one term as a worker believed it: from its OnStartedLeading to the earlier of
// the moment it saw the term end and the latest deadline Valid() promised it.
type Interval struct {
	Pod   string `json:"pod"`
	UID   string `json:"uid"`
	Slot  int32  `json:"slot,omitempty"`
	Token int64  `json:"token"`
	Start int64  `json:"start"`
	End   int64  `json:"end"`
}

// Intervals derives the leadership intervals of h.
func (h WorkerHistory) Intervals() []Interval {
	var out []Interval
	var open *Interval
	var until int64
	closeAt := func(m int64) {
		if open == nil {
			return
		}
		end := until
		if m > 0 && (end == 0 || m < end) {
			end = m
		}
		if h.Exited > 0 && h.Exited < end {
			end = h.Exited
		}
		if end < open.Start {
			end = open.Start
		}
		open.End = end
		out = append(out, *open)
		open, until = nil, 0
	}
	for _, e := range h.Events {
		switch e.Kind {
		case EvStart:
			closeAt(e.Mono)
			open = &Interval{Pod: h.Pod, UID: h.UID, Slot: e.Slot, Token: e.Token, Start: e.Mono}
		case EvCall:
			if open != nil && e.Token == open.Token && e.Slot == open.Slot && e.Until > until {
				until = e.Until
			}
		case EvEnd:
			if open != nil && e.Token == open.Token && e.Slot == open.Slot {
				closeAt(e.Mono)
			}
		}
	}
	closeAt(0) // killed while leading: the last deadline it was promised bounds it
	return out
}

// LedgerOp is one write as its client saw it: the input, the call and return times, and the
// reply. Ambiguous writes (no reply) have Return math.MaxInt64.
type LedgerOp struct {
	Client    int    `json:"client"`
	Writer    string `json:"writer"`
	Op        string `json:"op"`
	Token     int64  `json:"token"`
	Call      int64  `json:"call"`
	Return    int64  `json:"return"`
	Ambiguous bool   `json:"ambiguous,omitempty"`
	Accepted  bool   `json:"accepted"`
	Highest   int64  `json:"highest"`
}

// LedgerOps derives the ledger operations of every history; client IDs follow the order of
// hs.
func LedgerOps(hs []WorkerHistory) []LedgerOp {
	var out []LedgerOp
	for ci, h := range hs {
		w := h.Writer()
		calls := map[int]LedgerOp{}
		var order []int
		for _, e := range h.Events {
			switch e.Kind {
			case EvStart:
				if e.Writer != "" {
					w = e.Writer // pkg/leadership draws a writer per term
				}
			case EvCall:
				calls[e.ID] = LedgerOp{Client: ci, Writer: w, Op: e.Op, Token: e.Token, Call: e.Mono, Return: math.MaxInt64, Ambiguous: true}
				order = append(order, e.ID)
			case EvReturn:
				op, ok := calls[e.ID]
				if !ok {
					continue
				}
				if e.Result == ResultError {
					calls[e.ID] = op // stays ambiguous: the request may have landed
					continue
				}
				op.Return, op.Ambiguous = e.Mono, false
				op.Accepted, op.Highest = e.Result == ResultOK, e.Highest
				calls[e.ID] = op
			}
		}
		for _, id := range order {
			out = append(out, calls[id])
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Call < out[j].Call })
	return out
}

// Outcome is one write the ledger decided, in the order it decided them (GET /outcomes).
type Outcome struct {
	Op       string `json:"op"`
	Token    int64  `json:"token"`
	Writer   string `json:"writer"`
	Accepted bool   `json:"accepted"`
}

// StatusObs is one observed version of a lock's status, in resourceVersion order.
type StatusObs struct {
	RV        uint64 `json:"rv"`
	Phase     string `json:"phase"`
	Holder    string `json:"holder,omitempty"`
	HolderUID string `json:"holderUID,omitempty"`
	Token     int64  `json:"token"`
	MaxToken  int64  `json:"maxToken"`
	Epoch     int64  `json:"epoch"`
	// Mono is when the harness saw it (CLOCK_MONOTONIC ns).
	Mono int64 `json:"mono"`
}
