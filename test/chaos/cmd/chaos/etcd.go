package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/internal/testenv"
)

// tcpProxy is a TCP proxy (etcd's pkg/proxy) on a chosen loopback port.
type tcpProxy struct {
	srv  proxy.Server
	stop func() // closes srv and waits for its error drain
	addr string // host:port it listens on
}

// newTCPProxy starts a proxy to the address to; a port taken between choosing and binding
// it (other processes share the machine) is retried with another.
func newTCPProxy(to string) (*tcpProxy, error) {
	var err error
	for range 5 {
		var p *tcpProxy
		if p, err = tryTCPProxy(to); err == nil {
			return p, nil
		}
	}
	return nil, err
}

func tryTCPProxy(to string) (*tcpProxy, error) {
	ports, err := testenv.FreePorts(1)
	if err != nil {
		return nil, err
	}
	from := url.URL{Scheme: "tcp", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	srv, stop, err := etcdtest.StartProxy(from, url.URL{Scheme: "tcp", Host: to})
	if err != nil {
		return nil, err
	}
	return &tcpProxy{srv: srv, stop: stop, addr: from.Host}, nil
}

// heal removes every fault.
func (p *tcpProxy) heal() {
	p.srv.UnblackholeTx()
	p.srv.UnblackholeRx()
	p.srv.UndelayTx()
	p.srv.UndelayRx()
}

func (p *tcpProxy) blackhole() { p.srv.BlackholeTx(); p.srv.BlackholeRx() }

func (p *tcpProxy) delay(d, jitter time.Duration) { p.srv.DelayTx(d, jitter); p.srv.DelayRx(d, jitter) }

func (p *tcpProxy) close() {
	p.heal()
	p.stop()
}

// member is one etcd process. Its peers reach it through peerProxy only, so that the proxy
// can cut or slow its peer traffic.
type member struct {
	name                 string
	dir                  string
	clientPort, peerPort int
	peerProxy            *tcpProxy
	proc                 *proc
}

func (m *member) clientAddr() string { return fmt.Sprintf("127.0.0.1:%d", m.clientPort) }
func (m *member) clientURL() string  { return "http://" + m.clientAddr() }
func (m *member) advertisedPeer() string {
	return "http://" + m.peerProxy.addr
}

// cluster is a 3-member etcd cluster of ./bin/etcd processes on loopback.
type cluster struct {
	bin, etcdutl, dir string
	members           []*member
	token             int // cluster token generation: every restore makes a new cluster
}

func startCluster(root, dir string, n int) (*cluster, error) {
	c := &cluster{bin: filepath.Join(root, "bin", "etcd"), etcdutl: filepath.Join(root, "bin", "etcdutl"), dir: dir}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	ports, err := testenv.FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	for i := range n {
		m := &member{name: fmt.Sprintf("m%d", i), dir: filepath.Join(dir, fmt.Sprintf("m%d", i)), clientPort: ports[2*i], peerPort: ports[2*i+1]}
		if m.peerProxy, err = newTCPProxy(fmt.Sprintf("127.0.0.1:%d", m.peerPort)); err != nil {
			c.close()
			return nil, err
		}
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		if err := c.start(m, "new"); err != nil {
			c.close()
			return nil, err
		}
	}
	if err := c.waitHealthy(30 * time.Second); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

func (c *cluster) initialCluster() string {
	var parts []string
	for _, m := range c.members {
		parts = append(parts, m.name+"="+m.advertisedPeer())
	}
	return strings.Join(parts, ",")
}

// start runs m's process; state is "new" for a fresh cluster, "existing" for a restart.
func (c *cluster) start(m *member, state string) error {
	args := []string{
		"--name", m.name, "--data-dir", m.dir,
		"--listen-client-urls", m.clientURL(), "--advertise-client-urls", m.clientURL(),
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", m.peerPort),
		"--initial-advertise-peer-urls", m.advertisedPeer(),
		"--initial-cluster", c.initialCluster(), "--initial-cluster-state", state,
		"--initial-cluster-token", fmt.Sprintf("chaos-%d", c.token),
		"--heartbeat-interval", "100", "--election-timeout", "1000",
		"--log-level", "warn", "--unsafe-no-fsync",
	}
	p, err := startProc(c.dir, "etcd-"+m.name, c.bin, nil, args...)
	if err != nil {
		return err
	}
	m.proc = p
	return nil
}

// kill SIGKILLs m and waits for it.
func (c *cluster) kill(m *member) {
	if m.proc != nil {
		m.proc.kill()
		m.proc = nil
	}
}

// restart starts a killed member again with its data.
func (c *cluster) restart(m *member) error {
	if m.proc != nil {
		return nil
	}
	return c.start(m, "existing")
}

func (c *cluster) client() (*clientv3.Client, error) {
	var eps []string
	for _, m := range c.members {
		eps = append(eps, m.clientURL())
	}
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
}

// leader returns the index of the member that reports itself leader, or -1.
func (c *cluster) leader(ctx context.Context) int {
	for i, m := range c.members {
		if m.proc == nil {
			continue
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.clientURL()}, DialTimeout: time.Second, Logger: zap.NewNop()})
		if err != nil {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := cli.Status(sctx, m.clientURL())
		cancel()
		_ = cli.Close()
		if err == nil && st.Header.MemberId == st.Leader {
			return i
		}
	}
	return -1
}

// waitHealthy waits until a linearizable read succeeds.
func (c *cluster) waitHealthy(limit time.Duration) error {
	cli, err := c.client()
	if err != nil {
		return err
	}
	defer cli.Close()
	deadline := time.Now().Add(limit)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = cli.Get(ctx, "health")
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd cluster not healthy after %v: %w", limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// snapshot saves a snapshot of the cluster to path.
func (c *cluster) snapshot(ctx context.Context, path string) error {
	cli, err := c.client()
	if err != nil {
		return err
	}
	defer cli.Close()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	defer rc.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.ReadFrom(rc); err != nil {
		return fmt.Errorf("snapshot: %w", err)
	}
	return f.Sync()
}

// restore stops every member and starts a new cluster from the snapshot at path, with
// its revision bumped by bump (0: no bump).
func (c *cluster) restore(path string, bump uint64) error {
	for _, m := range c.members {
		c.kill(m)
	}
	c.token++
	for _, m := range c.members {
		if err := os.RemoveAll(m.dir); err != nil {
			return err
		}
		args := []string{"snapshot", "restore", path, "--data-dir", m.dir, "--name", m.name,
			"--initial-cluster", c.initialCluster(), "--initial-advertise-peer-urls", m.advertisedPeer(),
			"--initial-cluster-token", fmt.Sprintf("chaos-%d", c.token)}
		if bump > 0 {
			args = append(args, "--bump-revision", fmt.Sprint(bump), "--mark-compacted")
		}
		out, err := exec.Command(c.etcdutl, args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("etcdutl %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, m := range c.members {
		if err := c.start(m, "new"); err != nil {
			return err
		}
	}
	return c.waitHealthy(30 * time.Second)
}

// healAll removes every peer fault, resumes stopped members and restarts killed ones.
func (c *cluster) healAll() error {
	var errs []error
	for _, m := range c.members {
		m.peerProxy.heal()
		if m.proc != nil {
			m.proc.signal(syscall.SIGCONT)
		}
		if err := c.restart(m); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (c *cluster) close() {
	for _, m := range c.members {
		c.kill(m)
		if m.peerProxy != nil {
			m.peerProxy.close()
		}
	}
}
