package redislock_test

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// subscriberAddrs returns the addresses of the server's pub/sub clients.
func subscriberAddrs(t *testing.T, e *env) []string {
	t.Helper()
	list, err := e.rdb.ClientList(ctx(t)).Result()
	if err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		var addr string
		sub := false
		for _, f := range strings.Fields(line) {
			switch {
			case strings.HasPrefix(f, "addr="):
				addr = strings.TrimPrefix(f, "addr=")
			case f == "sub=1":
				sub = true
			}
		}
		if sub {
			addrs = append(addrs, addr)
		}
	}
	return addrs
}

// forwarder is a TCP forwarder whose connections can be cut one at a time
// without a reset: a cut connection's bytes are discarded both ways and
// both ends stay open (a half-open connection, as after a partition).
type forwarder struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[string]*fwdConn // by the server-side connection's local address
	wg     sync.WaitGroup
}

type fwdConn struct {
	client, server net.Conn
	dead           atomic.Bool
}

func startForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln, target: target, conns: map[string]*fwdConn{}}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		f.mu.Lock()
		for _, c := range f.conns {
			_ = c.client.Close()
			_ = c.server.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *forwarder) addr() string { return f.ln.Addr().String() }

func (f *forwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", f.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		fc := &fwdConn{client: c, server: s}
		f.mu.Lock()
		f.conns[s.LocalAddr().String()] = fc
		f.mu.Unlock()
		f.wg.Add(2)
		go f.pump(fc, c, s)
		go f.pump(fc, s, c)
	}
}

func (f *forwarder) pump(fc *fwdConn, src, dst net.Conn) {
	defer f.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !fc.dead.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			_ = dst.Close()
			return
		}
	}
}

// cut makes the connection whose server side is addr (as the server sees
// its client) discard everything from now on; false if there is none.
func (f *forwarder) cut(addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	fc, ok := f.conns[addr]
	if ok {
		fc.dead.Store(true)
	}
	return ok
}
