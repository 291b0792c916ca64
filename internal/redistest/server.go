package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startTimeout bounds how long redis-server may take to answer PING.
const startTimeout = 10 * time.Second

// ErrNoBinary means redis-server is not installed.
var ErrNoBinary = errors.New("redis-server not found in PATH: run `make redis-server` (installs Debian's redis-server)")

// Persistence is how a server keeps its data across a restart.
type Persistence int

const (
	// None keeps nothing: no RDB snapshots, no AOF. A restart starts empty.
	None Persistence = iota
	// AOF writes every command to the append-only file and fsyncs it before
	// replying (appendonly yes, appendfsync always).
	AOF
)

// Config configures a server.
type Config struct {
	// Persistence defaults to None.
	Persistence Persistence
	// ReplicaOf, when set, makes the server a replica of that host:port.
	ReplicaOf string
}

// Server is one redis-server process that can be killed, paused and started
// again on the same port and directory.
type Server struct {
	cfg  Config
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has been waited for
}

// Start starts a server for t, stopped and removed at cleanup. A missing
// redis-server fails the test with the make target that installs it.
func Start(t testing.TB, cfg Config) *Server {
	t.Helper()
	dir := t.TempDir()
	s, err := New(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// New starts a server with its data in dir (which must exist). The caller
// calls Stop.
func New(dir string, cfg Config) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoBinary
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, bin: bin, dir: dir, port: port}
	if err := s.Restart(); err != nil {
		return nil, err
	}
	return s, nil
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Dir returns the server's data directory.
func (s *Server) Dir() string { return s.dir }

// PID returns the running process's ID, or 0 when it is stopped.
func (s *Server) PID() int {
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func (s *Server) args() []string {
	a := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--daemonize", "no", "--protected-mode", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"), "--databases", "1",
		"--repl-diskless-sync-delay", "0", // a replica syncs at once, not after 5 s
	}
	if s.cfg.Persistence == AOF {
		a = append(a, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		a = append(a, "--appendonly", "no")
	}
	if s.cfg.ReplicaOf != "" {
		host, port, _ := net.SplitHostPort(s.cfg.ReplicaOf)
		a = append(a, "--replicaof", host, port)
	}
	return a
}

// Restart starts the process again (after Kill) on the same port and
// directory and waits until it answers PING. With Persistence None it starts
// empty.
func (s *Server) Restart() error {
	if s.cmd != nil {
		return fmt.Errorf("restart redis-server on %s: still running (pid %d)", s.Addr(), s.PID())
	}
	cmd := exec.Command(s.bin, s.args()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd, s.exit = cmd, make(chan struct{})
	go func(exit chan struct{}) { _ = cmd.Wait(); close(exit) }(s.exit)
	if err := s.waitReady(); err != nil {
		s.Kill()
		log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
		return fmt.Errorf("start redis-server on %s: %w\n%s", s.Addr(), err, log)
	}
	return nil
}

func (s *Server) waitReady() error {
	cli := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer cli.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := cli.Ping(ctx).Err()
		if err == nil && s.cfg.Persistence == AOF {
			// With AOF the server answers LOADING while it replays the file.
			err = cli.Get(ctx, "redistest:probe").Err()
			if errors.Is(err, redis.Nil) {
				err = nil
			}
		}
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exit:
			return errors.New("exited before answering PING")
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PING answer within %v: %w", startTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill sends SIGKILL to the process (resuming it first if paused) and waits
// for it: nothing is flushed that was not already.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.exit
	s.cmd = nil
}

// Stop kills the process if it runs. It is Start's cleanup.
func (s *Server) Stop() { s.Kill() }

// Pause stops the process with SIGSTOP: connections stay open, nothing is
// answered, keys do not expire, until Resume.
func (s *Server) Pause() error {
	if s.cmd == nil {
		return errors.New("pause redis-server: not running")
	}
	return s.cmd.Process.Signal(syscall.SIGSTOP)
}

// Resume continues a paused process with SIGCONT.
func (s *Server) Resume() error {
	if s.cmd == nil {
		return errors.New("resume redis-server: not running")
	}
	return s.cmd.Process.Signal(syscall.SIGCONT)
}

// Client returns a client of the server, closed at cleanup.
func (s *Server) Client(t testing.TB) *redis.Client {
	t.Helper()
	return ClientOf(t, s.Addr())
}

// ClientOf returns a client of addr (a server or a proxy) closed at cleanup.
// go-redis's own retries are off, so that a fault reaches the code under
// test instead of being hidden by a resend, and its socket timeouts are 1 s
// (default 3 s) to keep fault tests short. Like go-redis's default it does
// not enable ContextTimeoutEnabled: the code under test must not rely on a
// context deadline to bound a call.
func ClientOf(t testing.TB, addr string) *redis.Client {
	t.Helper()
	cli := redis.NewClient(&redis.Options{
		Addr: addr, MaxRetries: -1, DialTimeout: 2 * time.Second,
		ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
