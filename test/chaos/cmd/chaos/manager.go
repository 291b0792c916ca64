package main

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
)

// manager supervises one lockwarden replica: it restarts the process whenever it exits (a
// replica that loses the election exits 1 and comes back as a standby), until stopped. Its
// etcd traffic goes through its own proxies, one per member, and its API server traffic
// through its own gate.
type manager struct {
	id      string
	dir     string
	bin     string
	env     []string
	args    []string
	proxies []*tcpProxy
	gate    *gate

	mu     sync.Mutex
	cur    *proc
	starts int
	quit   chan struct{}
	done   chan struct{}
}

func (m *manager) start() {
	m.quit, m.done = make(chan struct{}), make(chan struct{})
	go m.supervise()
}

func (m *manager) supervise() {
	defer close(m.done)
	for {
		p, err := startProc(m.dir, m.id, m.bin, m.env, m.args...)
		if err != nil {
			fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
			return
		}
		m.mu.Lock()
		m.cur = p
		m.starts++
		m.mu.Unlock()
		select {
		case <-m.quit:
			p.stop(5 * time.Second)
			return
		case <-p.exited:
		}
		select {
		case <-m.quit:
			return
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// current returns the running process, or nil.
func (m *manager) current() *proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur
}

func (m *manager) signal(sig syscall.Signal) {
	if p := m.current(); p != nil {
		p.signal(sig)
	}
}

// stop ends supervision and the process, and waits.
func (m *manager) stop() {
	if m.quit != nil {
		m.signal(syscall.SIGCONT)
		close(m.quit)
		<-m.done
	}
	for _, p := range m.proxies {
		p.close()
	}
	if m.gate != nil {
		m.gate.close()
	}
}
