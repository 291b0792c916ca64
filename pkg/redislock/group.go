package redislock

import (
	"context"
	"sync"
)

// group counts a Client's goroutines (watchdogs, renewal, release and
// delete calls, the wake dispatcher) so that Close can wait for them within
// its context. Unlike sync.WaitGroup, add may be called at any time, also
// while someone waits and after the count reached zero: a Release after
// Close still runs its call in a counted goroutine.
//
// A goroutine blocked in go-redis on a connection without a read deadline
// (ReadTimeout -1, a network that swallows requests) ends only when that
// connection ends; wait returns at its context's end all the same and the
// goroutine stays counted, so a later wait still sees it.
type group struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to 0; nil while nobody waits
}

// add counts one goroutine that is about to start.
func (g *group) add() {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
}

// done uncounts a goroutine that has ended.
func (g *group) done() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n--
	if g.n == 0 && g.idle != nil {
		close(g.idle)
		g.idle = nil
	}
}

// goFunc runs f in a counted goroutine.
func (g *group) goFunc(f func()) {
	g.add()
	go func() {
		defer g.done()
		f()
	}()
}

// wait returns nil once no goroutine is counted, or ctx.Err() when ctx ends
// first.
func (g *group) wait(ctx context.Context) error {
	g.mu.Lock()
	if g.n == 0 {
		g.mu.Unlock()
		return nil
	}
	if g.idle == nil {
		g.idle = make(chan struct{})
	}
	idle := g.idle
	g.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// call runs f in a counted goroutine and waits for it, or for ctx. It
// reports whether f returned. go-redis without ContextTimeoutEnabled does
// not watch the context on the socket, so a call can block until the
// connection's read deadline, or forever without one: call returns at ctx's
// end regardless, and f's goroutine ends with its connection. With a ctx
// that can never end, f runs on the caller's goroutine.
func (g *group) call(ctx context.Context, f func() error) (returned bool, err error) {
	if ctx.Done() == nil {
		return true, f()
	}
	res := make(chan error, 1)
	g.goFunc(func() { res <- f() })
	select {
	case err := <-res:
		return true, err
	case <-ctx.Done():
		select {
		case err := <-res: // both ready: the answer counts
			return true, err
		default:
			return false, nil
		}
	}
}
