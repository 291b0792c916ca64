package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	down   bool          // halted (globalmanager.go): not started again until resume
	wake   chan struct{} // resume's nudge, buffered
	quit   chan struct{}
	done   chan struct{}
}

// connect gives m its path to h's API server (a gate, and a kubeconfig through it in m.dir)
// and to every member of h's etcd (a proxy each), and its arguments: the run's etcd prefix
// and h's timing. env is added to the process's environment.
func (m *manager) connect(h *harness, prefix string, env ...string) error {
	var err error
	if m.gate, err = startGate(h.cp.Config); err != nil {
		return err
	}
	kcfg := filepath.Join(m.dir, m.id+".kubeconfig")
	if err := m.gate.writeKubeconfig(kcfg); err != nil {
		return err
	}
	m.env = append([]string{"KUBECONFIG=" + kcfg}, env...)
	var eps []string
	for _, mem := range h.etcd.members {
		p, err := newTCPProxy(mem.clientAddr())
		if err != nil {
			return err
		}
		m.proxies = append(m.proxies, p)
		eps = append(eps, "http://"+p.addr)
	}
	m.args = []string{"--kubeconfig", kcfg, "--etcd-endpoints", strings.Join(eps, ","), "--etcd-prefix", prefix,
		"--election-ttl", h.timing.ElectionTTL.String(), "--etcd-lease-ttl", (2 * h.timing.ElectionTTL).String(),
		"--metrics-bind-address", "0", "--health-probe-bind-address", "0", "--identity", m.id}
	return nil
}

func (m *manager) start() {
	m.quit, m.done, m.wake = make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
	go m.supervise()
}

func (m *manager) supervise() {
	defer close(m.done)
	for {
		m.mu.Lock()
		down := m.down
		m.mu.Unlock()
		if down {
			select {
			case <-m.quit:
				return
			case <-m.wake:
				continue
			}
		}
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
