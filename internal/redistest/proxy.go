package redistest

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// queueLen bounds the chunks a delayed direction holds per connection; a
// reader that gets this far ahead waits (TCP backpressure, as a slow link).
const queueLen = 4096

// Proxy is a userspace TCP proxy on a loopback port in front of one server.
// Each direction (Tx: client -> server, Rx: server -> client) can be delayed
// by a fixed time plus a uniform random jitter, or blackholed (bytes read and
// discarded, connections left open); DropConnections closes every open
// connection. Delays keep the byte order of each connection, as TCP does: a
// chunk is delivered at its arrival time plus its delay, but never before
// the chunk ahead of it. Settings apply to chunks that arrive after the
// change.
type Proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	tx, rx fault
	conns  map[net.Conn]struct{}
	closed bool

	pending atomic.Int64 // chunks read and not yet written (or discarded)

	wg sync.WaitGroup
}

// fault is one direction's setting.
type fault struct {
	delay, jitter time.Duration
	blackhole     bool
}

// StartProxy starts a proxy to target (host:port) for t, closed at cleanup.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := NewProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// NewProxy starts a proxy to target (host:port) on a free loopback port. The
// caller calls Close.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listen for proxy to %s: %w", target, err)
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// DelayTx delays client -> server traffic by d plus a uniform random jitter
// in [0, jitter); zeros remove the delay.
func (p *Proxy) DelayTx(d, jitter time.Duration) {
	p.set(func() { p.tx.delay, p.tx.jitter = d, jitter })
}

// DelayRx delays server -> client traffic by d plus a jitter in [0, jitter).
func (p *Proxy) DelayRx(d, jitter time.Duration) {
	p.set(func() { p.rx.delay, p.rx.jitter = d, jitter })
}

// BlackholeTx discards client -> server traffic while on.
func (p *Proxy) BlackholeTx(on bool) { p.set(func() { p.tx.blackhole = on }) }

// BlackholeRx discards server -> client traffic while on: requests reach
// the server and run, their replies are lost.
func (p *Proxy) BlackholeRx(on bool) { p.set(func() { p.rx.blackhole = on }) }

// Heal removes every delay and blackhole.
func (p *Proxy) Heal() { p.set(func() { p.tx, p.rx = fault{}, fault{} }) }

func (p *Proxy) set(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f()
}

// DropConnections closes every open connection (both sides); new ones are
// accepted as usual.
func (p *Proxy) DropConnections() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// Pending returns how many chunks the proxy has read and not yet delivered:
// zero once delayed traffic has arrived.
func (p *Proxy) Pending() int64 { return p.pending.Load() }

// Close stops accepting, closes every connection and waits for the proxy's
// goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	_ = p.ln.Close()
	p.DropConnections()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		s, err := net.DialTimeout("tcp", p.target, 2*time.Second)
		if err != nil {
			_ = c.Close() // the server is down: the client sees the refusal as a reset
			continue
		}
		if !p.track(c, s) {
			return
		}
		p.wg.Add(2)
		go p.pump(c, s, &p.tx)
		go p.pump(s, c, &p.rx)
	}
}

// track registers both ends of a connection, or closes them if the proxy is
// closing.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		if p.closed {
			_ = c.Close()
			continue
		}
		p.conns[c] = struct{}{}
	}
	return !p.closed
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

// chunk is bytes read at a time, to be written at due.
type chunk struct {
	b   []byte
	due time.Time
}

// pump copies src to dst under the direction's fault: a reader stamps each
// chunk with its due time, a writer delivers it then. Either side's end
// closes both connections.
func (p *Proxy) pump(src, dst net.Conn, f *fault) {
	defer p.wg.Done()
	q := make(chan chunk, queueLen)
	var writer sync.WaitGroup
	writer.Add(1)
	go func() {
		defer writer.Done()
		for c := range q {
			if d := time.Until(c.due); d > 0 {
				time.Sleep(d)
			}
			_, err := dst.Write(c.b)
			p.pending.Add(-1)
			if err != nil {
				p.untrack(src, dst)
				for range q { // let the reader finish
					p.pending.Add(-1)
				}
				return
			}
		}
	}()
	var last time.Time
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			due, drop := p.schedule(f, last)
			if !drop {
				last = due
				p.pending.Add(1)
				q <- chunk{b: append([]byte(nil), buf[:n]...), due: due}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				_ = err // a reset: the faults under test cause them
			}
			break
		}
	}
	close(q)
	writer.Wait()
	p.untrack(src, dst)
}

// schedule returns when a chunk arriving now is due, never before the
// previous chunk's due time, or drop if the direction is blackholed.
func (p *Proxy) schedule(f *fault, last time.Time) (due time.Time, drop bool) {
	p.mu.Lock()
	cur := *f
	p.mu.Unlock()
	if cur.blackhole {
		return time.Time{}, true
	}
	d := cur.delay
	if cur.jitter > 0 {
		d += rand.N(cur.jitter)
	}
	due = time.Now().Add(d)
	if due.Before(last) {
		due = last
	}
	return due, false
}
