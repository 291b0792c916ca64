package etcdtest

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
)

// startTimeout bounds how long a member may take to become ready.
const startTimeout = 30 * time.Second

// Option configures an embedded member.
type Option func(*config)

type config struct {
	fsync     bool
	tick      time.Duration
	election  time.Duration
	maxTxnOps uint
}

// WithFsync turns fsync on (default off: tests measure logic, not disks;
// benchmarks that compare durability costs turn it on).
func WithFsync(on bool) Option { return func(c *config) { c.fsync = on } }

// WithTiming sets the raft heartbeat and election timeout (default 100 ms
// and 1 s, etcd's defaults).
func WithTiming(heartbeat, election time.Duration) Option {
	return func(c *config) { c.tick, c.election = heartbeat, election }
}

// WithMaxTxnOps sets --max-txn-ops (default 128).
func WithMaxTxnOps(n uint) Option { return func(c *config) { c.maxTxnOps = n } }

func newConfig(opts []Option) config {
	c := config{tick: 100 * time.Millisecond, election: time.Second, maxTxnOps: 128}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// member is the configuration of one embedded etcd member that can be
// started again on the same ports and data.
type member struct {
	name       string
	dir        string
	clientPort int
	peerPort   int
	cluster    string // initial-cluster
	opts       config
}

func (m *member) clientURL() string { return fmt.Sprintf("http://127.0.0.1:%d", m.clientPort) }
func (m *member) peerURL() string   { return fmt.Sprintf("http://127.0.0.1:%d", m.peerPort) }

// start starts the member and waits until it serves clients.
func (m *member) start() (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cu, _ := url.Parse(m.clientURL())
	pu, _ := url.Parse(m.peerURL())
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = m.cluster
	cfg.InitialClusterToken = "etcdtest"
	cfg.UnsafeNoFsync = !m.opts.fsync
	cfg.TickMs = uint(m.opts.tick / time.Millisecond)
	cfg.ElectionMs = uint(m.opts.election / time.Millisecond)
	cfg.MaxTxnOps = m.opts.maxTxnOps
	cfg.Logger = "zap"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start etcd %s: %w", m.name, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("start etcd %s: %w", m.name, err)
	case <-time.After(startTimeout):
		e.Close()
		return nil, fmt.Errorf("start etcd %s: not ready after %v", m.name, startTimeout)
	}
}

// Server is a single-member embedded etcd.
type Server struct {
	m    *member
	etcd *embed.Etcd
	own  bool // dir is ours to remove
}

// Start starts a single-member etcd for the test, stopped at cleanup.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	ports := FreePorts(t, 2)
	s := &Server{m: &member{name: "m0", dir: t.TempDir(), clientPort: ports[0], peerPort: ports[1], opts: newConfig(opts)}}
	s.m.cluster = fmt.Sprintf("%s=%s", s.m.name, s.m.peerURL())
	e, err := s.m.start()
	if err != nil {
		t.Fatal(err)
	}
	s.etcd = e
	t.Cleanup(s.Close)
	return s
}

// New starts a single-member etcd outside a test (in TestMain, for
// examples); Close stops it and removes its data.
func New(opts ...Option) (*Server, error) {
	dir, err := os.MkdirTemp("", "etcdtest-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	s := &Server{m: &member{name: "m0", dir: dir, clientPort: ports[0], peerPort: ports[1], opts: newConfig(opts)}, own: true}
	s.m.cluster = fmt.Sprintf("%s=%s", s.m.name, s.m.peerURL())
	if s.etcd, err = s.m.start(); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return s, nil
}

// Endpoint returns the client URL.
func (s *Server) Endpoint() string { return s.m.clientURL() }

// Stop stops the member, keeping its data for Restart.
func (s *Server) Stop() {
	if s.etcd != nil {
		s.etcd.Close()
		s.etcd = nil
	}
}

// Restart starts a stopped member again on the same ports and data.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if s.etcd != nil {
		t.Fatal("restart: member is running")
	}
	e, err := s.m.start()
	if err != nil {
		t.Fatal(err)
	}
	s.etcd = e
}

// Close stops the member (and removes its data if New created it).
func (s *Server) Close() {
	s.Stop()
	if s.own {
		os.RemoveAll(s.m.dir)
	}
}

// Client returns a client of the member, closed at cleanup.
func (s *Server) Client(t testing.TB, dialOpts ...grpc.DialOption) *clientv3.Client {
	t.Helper()
	return NewClient(t, []string{s.Endpoint()}, dialOpts...)
}

// NewClient returns a client of endpoints (URLs, or host:port), closed at
// cleanup. Its logger is silent.
func NewClient(t testing.TB, endpoints []string, dialOpts ...grpc.DialOption) *clientv3.Client {
	t.Helper()
	cli, err := Dial(endpoints, dialOpts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Dial returns a client of endpoints with a silent logger; the caller
// closes it.
func Dial(endpoints []string, dialOpts ...grpc.DialOption) (*clientv3.Client, error) {
	eps := make([]string, len(endpoints))
	for i, ep := range endpoints {
		eps[i] = strings.TrimPrefix(ep, "http://")
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: 5 * time.Second,
		DialOptions: dialOpts,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client of %v: %w", endpoints, err)
	}
	return cli, nil
}
