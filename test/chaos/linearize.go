package chaos

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// ledgerState is the fenced ledger's state in the model: the highest admitted token and the
// writer that first presented it (pkg/fence.Monotonic).
type ledgerState struct {
	highest int64
	writer  string
}

// ledgerInput is a write: raise the fence or append, with a token.
type ledgerInput struct {
	op     string
	writer string
	token  int64
}

// ledgerOutput is the ledger's reply; unknown for a write that got none.
type ledgerOutput struct {
	unknown  bool
	accepted bool
	highest  int64
}

// admit is the specification of the ledger's admit check.
func admit(s ledgerState, in ledgerInput) (ledgerState, bool) {
	switch {
	case in.token > s.highest:
		return ledgerState{highest: in.token, writer: in.writer}, true
	case in.token == s.highest && in.writer == s.writer:
		return s, true
	}
	return s, false
}

// LedgerModel is the sequential specification of the fenced ledger. A write with a reply
// must match it (accepted or not, and the highest token after the decision); a write without
// one may have been applied or not.
var LedgerModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{ledgerState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(ledgerState), input.(ledgerInput), output.(ledgerOutput)
		next, ok := admit(s, in)
		if out.unknown {
			if ok && next != s {
				return []any{s, next} // lost before or after the ledger decided
			}
			return []any{s}
		}
		if ok != out.accepted || next.highest != out.highest {
			return nil
		}
		return []any{next}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(ledgerInput), output.(ledgerOutput)
		switch {
		case out.unknown:
			return fmt.Sprintf("%s(%d) -> ?", in.op, in.token)
		case out.accepted:
			return fmt.Sprintf("%s(%d) -> ok, highest %d", in.op, in.token, out.highest)
		}
		return fmt.Sprintf("%s(%d) -> stale, highest %d", in.op, in.token, out.highest)
	},
	DescribeState: func(state any) string {
		s := state.(ledgerState)
		return fmt.Sprintf("highest %d (%.8s)", s.highest, s.writer)
	},
}

// Operations converts ledger operations into porcupine's form.
func Operations(ops []LedgerOp) []porcupine.Operation {
	out := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		out = append(out, porcupine.Operation{
			ClientId: o.Client,
			Input:    ledgerInput{op: o.Op, writer: o.Writer, token: o.Token},
			Call:     o.Call,
			Output:   ledgerOutput{unknown: o.Ambiguous, accepted: o.Accepted, highest: o.Highest},
			Return:   o.Return,
		})
	}
	return out
}

// CheckLinearizable checks the ledger history with porcupine. It returns the result (Ok,
// Illegal or Unknown after timeout), the info for porcupine.Visualize, and a violation when
// the history is not linearizable.
func CheckLinearizable(ops []LedgerOp, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo, []Violation) {
	model := LedgerModel.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, Operations(ops), timeout)
	if res == porcupine.Illegal {
		return res, info, []Violation{{Checker: "linearizable", Detail: fmt.Sprintf("the ledger history of %d writes is not linearizable (see the porcupine HTML)", len(ops))}}
	}
	return res, info, nil
}

// Visualize writes porcupine's HTML view of a ledger history to path.
func Visualize(info porcupine.LinearizationInfo, path string) error {
	return porcupine.VisualizePath(LedgerModel.ToModel(), info, path)
}
