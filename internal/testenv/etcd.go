package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Etcd is an etcd server process from ./bin/etcd, on loopback, that a test can stop and
// start again with its data kept.
type Etcd struct {
	// Endpoint is the client URL.
	Endpoint string

	bin, dir   string
	log        io.Writer
	clientPort int
	peerPort   int
	cmd        *exec.Cmd
	exited     chan struct{}
}

// StartEtcd starts ./bin/etcd (built by `make envtest-bins`) with its data in dir, its
// output (errors only) on stderr.
func StartEtcd(root, dir string) (*Etcd, error) { return StartEtcdLogging(root, dir, os.Stderr) }

// StartEtcdLogging is StartEtcd with etcd's output (errors only) to log.
func StartEtcdLogging(root, dir string, log io.Writer) (*Etcd, error) {
	bin := filepath.Join(root, "bin", "etcd")
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%w: %s not found: run `make envtest-bins`", ErrBinariesMissing, bin)
	}
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	e := &Etcd{bin: bin, dir: dir, clientPort: ports[0], peerPort: ports[1], log: log}
	e.Endpoint = fmt.Sprintf("http://127.0.0.1:%d", e.clientPort)
	return e, e.Start()
}

// Start starts the process (again) and waits until it serves.
func (e *Etcd) Start() error {
	peer := fmt.Sprintf("http://127.0.0.1:%d", e.peerPort)
	e.cmd = exec.Command(e.bin,
		"--name", "lockwarden-test", "--data-dir", e.dir,
		"--listen-client-urls", e.Endpoint, "--advertise-client-urls", e.Endpoint,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "lockwarden-test="+peer, "--log-level", "error",
		"--unsafe-no-fsync")
	e.cmd.Stdout, e.cmd.Stderr = e.log, e.log
	if err := e.cmd.Start(); err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	e.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) {
		_ = cmd.Wait()
		close(exited)
	}(e.cmd, e.exited)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = cli.Get(ctx, "health")
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-e.exited:
			return errors.New("etcd exited during start")
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("etcd not serving after 30s: %w", err)
}

// Stop kills the process and waits for it to exit.
func (e *Etcd) Stop() {
	if e.cmd == nil || e.cmd.Process == nil {
		return
	}
	_ = e.cmd.Process.Signal(syscall.SIGKILL)
	<-e.exited
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1 (free when chosen; a port can be
// taken by someone else before it is bound, so callers that can retry should).
func FreePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
