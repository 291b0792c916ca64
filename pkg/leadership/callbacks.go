package leadership

import (
	"sync"
	"sync/atomic"
)

// taskKind is what a queued callback task does.
type taskKind int

const (
	taskStart taskKind = iota
	taskStop
	taskNewHolder
	taskRelease
)

// task is one queued callback.
type task struct {
	kind   taskKind
	term   *term // taskStart, taskStop
	holder string
	token  int64 // taskNewHolder
	// release is sent after the task's callbacks (taskStop), or is the task (taskRelease).
	release *releaseJob
}

// runner calls the callbacks one at a time, in queue order, on its own goroutine, so that
// the decision loop never waits for user code. The queue is unbounded: the loop adds at most
// a few tasks per observation, and a stuck callback shows in ReadyzCheck, not as a blocked
// loop.
type runner struct {
	cbs      Callbacks
	stopDone func() // reports that a term's stop callbacks returned
	send     func(*releaseJob)
	skip     func(*releaseJob)
	// setWriter makes a term's writer Writer()'s, right before its OnStartedLeading call.
	setWriter func(string)
	// pending counts releases queued and not yet sent or skipped.
	pending atomic.Int32

	// Config.SingleTerm only (see singleTerm); verdicts is nil without it.
	verdicts      chan<- bool
	stoppedCalled bool // OnStoppedLeading was called; only run uses it

	mu     sync.Mutex
	queue  []task
	closed bool
	wake   chan struct{} // capacity 1: "the queue changed"
}

func newRunner(cbs Callbacks, stopDone func()) *runner {
	return &runner{cbs: cbs, stopDone: stopDone, wake: make(chan struct{}, 1)}
}

// singleTerm gives the runner Config.SingleTerm's contract: for every start task it tells the
// loop on verdicts whether OnStartedLeading is called (true) or the term was skipped (false),
// before calling it; and when the queue is drained after close it calls OnStoppedLeading if it
// has not been called yet. verdicts needs a capacity of 1: the loop starts no term while a
// verdict is due, so at most one is ever pending.
func (r *runner) singleTerm(verdicts chan<- bool) { r.verdicts = verdicts }

func (r *runner) start(t *term) { r.push(task{kind: taskStart, term: t}) }
func (r *runner) stop(t *term, j *releaseJob) {
	r.push(task{kind: taskStop, term: t, release: j})
}
func (r *runner) release(j *releaseJob) { r.push(task{kind: taskRelease, release: j}) }
func (r *runner) newHolder(holder string, tok int64) {
	r.push(task{kind: taskNewHolder, holder: holder, token: tok})
}

func (r *runner) push(t task) {
	if t.release != nil {
		r.pending.Add(1)
	}
	r.mu.Lock()
	r.queue = append(r.queue, t)
	r.mu.Unlock()
	r.signal()
}

// close lets run return once the queue is drained; OnNewHolder tasks still queued are dropped.
func (r *runner) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.signal()
}

func (r *runner) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// next waits for the next task; false means closed and drained.
func (r *runner) next() (task, bool, bool) {
	for {
		r.mu.Lock()
		if len(r.queue) > 0 {
			t := r.queue[0]
			r.queue = r.queue[1:]
			closed := r.closed
			r.mu.Unlock()
			return t, closed, true
		}
		closed := r.closed
		r.mu.Unlock()
		if closed {
			return task{}, true, false
		}
		<-r.wake
	}
}

// run calls the callbacks until closed and drained.
func (r *runner) run() {
	for {
		t, closed, ok := r.next()
		if !ok {
			if r.verdicts != nil && !r.stoppedCalled && r.cbs.OnStoppedLeading != nil {
				r.cbs.OnStoppedLeading() // SingleTerm: always once when Run ends, as client-go's defer
			}
			return
		}
		switch t.kind {
		case taskStart:
			// A term that ended before its turn came is skipped, with its stop.
			skipped := t.term.ctx.Err() != nil
			if r.verdicts != nil {
				select {
				case r.verdicts <- !skipped:
				default: // cannot happen: at most one verdict is pending
				}
			}
			if skipped {
				continue
			}
			t.term.started = true
			if r.setWriter != nil {
				r.setWriter(t.term.writer)
			}
			if r.cbs.OnStartedLeading != nil {
				r.cbs.OnStartedLeading(t.term.ctx, t.term.token)
			}
			t.term.ranToEnd = t.term.ctx.Err() != nil
		case taskStop:
			if t.term.started && r.cbs.OnStoppedLeading != nil {
				r.cbs.OnStoppedLeading()
				r.stoppedCalled = true
			}
			r.stopDone()
			switch j := t.release; {
			case j == nil:
			case j.auto && t.term.started && !t.term.ranToEnd:
				r.skip(j) // it returned while the term lasted: its work may go on elsewhere
				r.pending.Add(-1)
			default:
				r.send(j) // after the work stopped: OnStartedLeading returned
				r.pending.Add(-1)
			}
		case taskRelease:
			r.send(t.release)
			r.pending.Add(-1)
		case taskNewHolder:
			if !closed && r.cbs.OnNewHolder != nil {
				r.cbs.OnNewHolder(t.holder, t.token)
			}
		}
	}
}
