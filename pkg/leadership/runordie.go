package leadership

import "context"

// RunOrDie is client-go's leaderelection.RunOrDie: it creates an Elector from cfg with
// SingleTerm set (whatever cfg says) and runs it, returning when Run returns, that is once the
// first term has ended or ctx has ended, after OnStoppedLeading has run (it always runs once).
// It panics with New's error, which wraps ErrInvalidConfig, when cfg is invalid.
//
// It gives no access to the Elector, so a callback cannot call Valid() before its writes, and
// neither ReadyzCheck, LivezCheck, Release nor Collector can be served: programs that need
// them (most should check Valid() right before each write) call New with SingleTerm and Run
// instead.
func RunOrDie(ctx context.Context, cfg Config) {
	cfg.SingleTerm = true
	e, err := New(cfg)
	if err != nil {
		panic(err)
	}
	if err := e.Run(ctx); err != nil {
		panic(err) // unreachable: only a second Run of one Elector fails
	}
}
