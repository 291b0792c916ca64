package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/testenv"
)

// stack is one control plane for one section: kube-apiserver and its etcd (envtest), a
// separate etcd for lockwarden, and, while started, the bin/lockwarden manager process.
// Every section gets a fresh stack, so that counters and caches start empty.
type stack struct {
	env        *testenv.Env
	dir        string // temporary; removed by close
	kubeconfig string
	bulk       *kubernetes.Clientset // the bench's own client: no client-side throttling
	crd        client.Client         // uncached, for DistributedLocks
	etcd       *testenv.Etcd
	etcdCli    *clientv3.Client
	mgr        *manager // nil unless started
}

// manager is a running bin/lockwarden process.
type manager struct {
	cmd         *exec.Cmd
	exited      chan struct{}
	metricsAddr string
	pprofAddr   string
	log         *os.File
}

var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := lockv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// newStack starts a control plane and lockwarden's etcd. The caller must call close.
func newStack(ctx context.Context) (s *stack, err error) {
	s = &stack{}
	defer func() {
		if err != nil {
			s.close()
			s = nil
		}
	}()
	if s.dir, err = os.MkdirTemp("", "lockwarden-bench-"); err != nil {
		return s, fmt.Errorf("temp dir: %w", err)
	}
	if s.env, err = testenv.Start(); err != nil {
		return s, err
	}
	s.kubeconfig = filepath.Join(s.dir, "kubeconfig")
	if err = s.env.Kubeconfig(s.kubeconfig); err != nil {
		return s, err
	}
	cfg := rest.CopyConfig(s.env.Config)
	cfg.QPS, cfg.Burst = -1, 0 // the bench's setup traffic is not what is measured
	if s.bulk, err = kubernetes.NewForConfig(cfg); err != nil {
		return s, fmt.Errorf("clientset: %w", err)
	}
	if s.crd, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return s, fmt.Errorf("client: %w", err)
	}
	if s.etcd, err = testenv.StartEtcd(s.env.Root, filepath.Join(s.dir, "etcd")); err != nil {
		return s, err
	}
	s.etcdCli, err = clientv3.New(clientv3.Config{Endpoints: []string{s.etcd.Endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return s, fmt.Errorf("etcd client: %w", err)
	}
	return s, ctx.Err()
}

// managerBin, when set (-manager), is the manager binary to run instead of bin/lockwarden:
// another build measured on the same machine, for an A/B comparison.
var managerBin string

// logDir, when set (-logs), receives a copy of every manager log before the stack's
// directory is removed.
var logDir string

// close stops everything the stack started and removes its directory.
func (s *stack) close() {
	s.stopManager()
	if logDir != "" && s.dir != "" {
		if data, err := os.ReadFile(filepath.Join(s.dir, "lockwarden.log")); err == nil {
			_ = os.MkdirAll(logDir, 0o755)
			f, err := os.CreateTemp(logDir, "lockwarden-*.log")
			if err == nil {
				_, _ = f.Write(data)
				_ = f.Close()
			}
		}
	}
	if s.etcdCli != nil {
		_ = s.etcdCli.Close()
	}
	if s.etcd != nil {
		s.etcd.Stop()
	}
	if s.env != nil {
		if err := s.env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
		}
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

// namespace creates a namespace.
func (s *stack) namespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := s.bulk.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// startManager starts bin/lockwarden against this stack and waits until it is the active
// replica (lockwarden_active 1 on its /metrics).
func (s *stack) startManager(ctx context.Context, extra ...string) error {
	bin := managerBin
	if bin == "" {
		bin = filepath.Join(s.env.Root, "bin", "lockwarden")
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("%s not found: run `make build`", bin)
	}
	ports, err := testenv.FreePorts(3)
	if err != nil {
		return err
	}
	m := &manager{metricsAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]), pprofAddr: fmt.Sprintf("127.0.0.1:%d", ports[2]), exited: make(chan struct{})}
	if m.log, err = os.Create(filepath.Join(s.dir, "lockwarden.log")); err != nil {
		return fmt.Errorf("manager log: %w", err)
	}
	args := append([]string{
		"--kubeconfig", s.kubeconfig, "--etcd-endpoints", s.etcd.Endpoint,
		"--election-ttl", "5s", "--etcd-lease-ttl", "30s",
		"--metrics-bind-address", m.metricsAddr,
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--pprof-bind-address", m.pprofAddr,
		"--identity", "bench-manager",
	}, extra...)
	m.cmd = exec.Command(bin, args...)
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	if err := m.cmd.Start(); err != nil {
		_ = m.log.Close()
		return fmt.Errorf("start lockwarden: %w", err)
	}
	go func() {
		_ = m.cmd.Wait()
		close(m.exited)
	}()
	s.mgr = m
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		select {
		case <-m.exited:
			return fmt.Errorf("lockwarden exited during start; log: %s", tail(m.log.Name()))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		fams, err := scrapeHTTP(ctx, "http://"+m.metricsAddr+"/metrics")
		if err == nil && sum(fams, "lockwarden_active", nil) == 1 {
			return nil
		}
	}
	return fmt.Errorf("lockwarden not active within a minute; log: %s", tail(m.log.Name()))
}

// stopManager stops the manager with SIGTERM (SIGKILL after 20 s) and waits for it.
func (s *stack) stopManager() {
	m := s.mgr
	if m == nil {
		return
	}
	s.mgr = nil
	select {
	case <-m.exited:
	default:
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.exited:
		case <-time.After(20 * time.Second):
			_ = m.cmd.Process.Kill()
			<-m.exited
		}
	}
	_ = m.log.Close()
}

// managerPID is the manager's process ID, 0 when not running.
func (s *stack) managerPID() int {
	if s.mgr == nil {
		return 0
	}
	return s.mgr.cmd.Process.Pid
}

// rss reads VmRSS and VmHWM (peak) of a process, in bytes.
func rss(pid int) (cur, peak int64, err error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read process status: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			cur = kb * 1024
		case "VmHWM:":
			peak = kb * 1024
		}
	}
	return cur, peak, nil
}

// apiMetrics scrapes the kube-apiserver's /metrics as the administrator.
func (s *stack) apiMetrics(ctx context.Context) (families, error) {
	data, err := s.bulk.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("scrape kube-apiserver metrics: %w", err)
	}
	return parseMetrics(strings.NewReader(string(data)))
}

// etcdMetrics scrapes lockwarden's etcd.
func (s *stack) etcdMetrics(ctx context.Context) (families, error) {
	return scrapeHTTP(ctx, s.etcd.Endpoint+"/metrics")
}

// managerMetrics scrapes the manager.
func (s *stack) managerMetrics(ctx context.Context) (families, error) {
	if s.mgr == nil {
		return nil, errors.New("manager not running")
	}
	return scrapeHTTP(ctx, "http://"+s.mgr.metricsAddr+"/metrics")
}

func scrapeHTTP(ctx context.Context, url string) (families, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	return parseMetrics(resp.Body)
}

// tail is the end of a log file, for error messages.
func tail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return string(data)
}
