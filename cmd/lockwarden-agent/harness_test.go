package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/internal/podsim"
	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// leaseSeconds is the tests' lock lease: short, so that a term ends within seconds, and long
// enough for grace 1s (a term starts with about L - margin = 4.5 s of validity).
const leaseSeconds = 6

// validFor is how long one confirming read keeps a term valid: L - margin.
func validFor() time.Duration {
	l := leaseSeconds * time.Second
	return l - leadership.DefaultMargin(l)
}

// fixture is one test's namespace, lock, stand-in kubelet and running controller.
type fixture struct {
	t       *testing.T
	ns      string
	lock    string
	kubelet *podsim.Kubelet
	dir     string
}

// newFixture creates a namespace with a lock of leaseSeconds over app=worker pods and starts
// the lockwarden controller for it (its own etcd prefix and election), stopped at cleanup.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	f := &fixture{t: t, ns: ns.Name, lock: "worker", dir: t.TempDir(),
		kubelet: &podsim.Kubelet{Client: cs, Namespace: ns.Name}}
	l := &lockv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: f.lock, Namespace: f.ns},
		Spec: lockv1.DistributedLockSpec{
			Candidates:           lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"app": "worker"})},
			LeaseDurationSeconds: leaseSeconds,
		},
	}
	if err := k8s.Create(context.Background(), l); err != nil {
		t.Fatalf("create lock: %v", err)
	}
	f.startController()
	return f
}

// startController runs the lockwarden controller for the namespace until the test's cleanup.
func (f *fixture) startController() { controllertest.ForNamespace(f.t, suite, f.ns) }

// pod creates a Running and Ready candidate pod.
func (f *fixture) pod(name string) *corev1.Pod {
	f.t.Helper()
	p, err := f.kubelet.CreateReadyPod(context.Background(), name, map[string]string{"app": "worker"})
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// get reads the lock through the live client.
func (f *fixture) get() *lockv1.DistributedLock {
	f.t.Helper()
	var l lockv1.DistributedLock
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: f.lock}, &l); err != nil {
		f.t.Fatalf("get lock: %v", err)
	}
	return &l
}

// grantedTo reports whether the lock's status or history shows token granted to uid.
func grantedTo(l *lockv1.DistributedLock, uid string, token int64) bool {
	if string(l.Status.HolderUID) == uid && l.Status.FencingToken == token {
		return true
	}
	for _, h := range l.Status.History {
		if string(h.HolderUID) == uid && h.Token == token {
			return true
		}
	}
	return false
}

// stamps are CLOCK_MONOTONIC readings, appended concurrently.
type stamps struct {
	mu  sync.Mutex
	all []int64
}

func (s *stamps) add(v int64) {
	s.mu.Lock()
	s.all = append(s.all, v)
	s.mu.Unlock()
}

// lastBefore is the newest stamp before t, or 0.
func (s *stamps) lastBefore(t int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best int64
	for _, v := range s.all {
		if v < t && v > best {
			best = v
		}
	}
	return best
}

// agent is one lockwarden-agent run in this process (run, as main calls it), reaching the API
// server through its own proxy, which records when each GET of the lock went upstream.
type agent struct {
	name, uid string
	proxy     *apiproxy.Proxy
	reads     *stamps // forward time of every GET of the lock (not watches)
	childFile string
	out       *syncBuffer
	cancel    context.CancelFunc
	done      chan int
}

// syncBuffer is a bytes.Buffer safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// startAgent runs `lockwarden-agent <args>` for pod p, with childEnv added to its environment
// (which its child inherits), through a new proxy. Cleanup stops it and checks exit code 0
// unless the test took the code itself.
func (f *fixture) startAgent(p *corev1.Pod, args []string, childEnv ...string) *agent {
	t := f.t
	t.Helper()
	a := &agent{name: p.Name, uid: string(p.UID), reads: &stamps{}, out: &syncBuffer{}, done: make(chan int, 1),
		childFile: filepath.Join(f.dir, p.Name+".children")}
	lockPath := "/apis/lockwarden.io/v1alpha1/namespaces/" + f.ns + "/distributedlocks/" + f.lock
	proxy, err := apiproxy.Start(env.Config, apiproxy.Options{OnForward: func(r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == lockPath && !r.URL.Query().Has("watch") {
			a.reads.add(monoNow())
		}
	}})
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	a.proxy = proxy
	kubeconfig := f.kubeconfigFor(proxy, p.Name)
	mode, rest := args[0], args[1:]
	full := append([]string{mode, "--lock", f.lock, "--namespace", f.ns, "--kubeconfig", kubeconfig}, rest...)
	environ := append(os.Environ(), "POD_UID="+a.uid, "POD_NAME="+a.name, childFileEnv+"="+a.childFile)
	environ = append(environ, childEnv...)
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	go func() { a.done <- run(ctx, full, environ, a.out, a.out) }()
	t.Cleanup(func() {
		cancel()
		proxy.SetMode(apiproxy.Pass)
		select {
		case code, ok := <-a.done:
			if ok && code != exitOK {
				t.Errorf("agent %s exited %d, want %d; its log:\n%s", a.name, code, exitOK, a.out)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("agent %s did not stop within 30s of its context's end; its log:\n%s", a.name, a.out)
		}
		if err := proxy.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	return a
}

// kubeconfigFor writes a kubeconfig that reaches the API server through proxy (which
// authenticates upstream), named after name, and returns its path.
func (f *fixture) kubeconfigFor(proxy *apiproxy.Proxy, name string) string {
	f.t.Helper()
	kubeconfig := filepath.Join(f.dir, name+".kubeconfig")
	pc := proxy.Config()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["proxy"] = &clientcmdapi.Cluster{Server: pc.Host, CertificateAuthorityData: pc.CAData}
	kc.AuthInfos["agent"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "agent"}
	kc.CurrentContext = "proxy"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		f.t.Fatalf("write kubeconfig: %v", err)
	}
	return kubeconfig
}

// wait takes the agent's exit code, waiting up to timeout.
func (a *agent) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case code := <-a.done:
		close(a.done) // cleanup sees it taken
		return code
	case <-time.After(timeout):
		t.Fatalf("agent %s still running after %v; its log:\n%s", a.name, timeout, a.out)
	}
	return 0
}

// record is one line of a child file.
type record struct {
	kind  string // start, grandchild, term
	pid   int
	at    int64 // CLOCK_MONOTONIC ns
	token int64 // start and grandchild
	slot  int   // start and grandchild: $LOCKWARDEN_SLOT, -1 when absent
}

// records reads the agent's child file.
func (a *agent) records() []record {
	b, err := os.ReadFile(a.childFile)
	if err != nil {
		return nil
	}
	var rs []record
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 {
			continue
		}
		r := record{kind: f[0]}
		r.pid, _ = strconv.Atoi(f[1])
		r.at, _ = strconv.ParseInt(f[2], 10, 64)
		if len(f) > 3 {
			r.token, _ = strconv.ParseInt(f[3], 10, 64)
		}
		r.slot = -1
		if len(f) > 4 {
			if n, err := strconv.Atoi(f[4]); err == nil {
				r.slot = n
			}
		}
		rs = append(rs, r)
	}
	return rs
}

// started returns the agent's start (and grandchild) records.
func (a *agent) started(kind string) []record {
	var rs []record
	for _, r := range a.records() {
		if r.kind == kind {
			rs = append(rs, r)
		}
	}
	return rs
}

// eventually polls cond every 5 ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, msg())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// osExecutable is this test binary, which runs as the child in child mode.
func osExecutable() (string, error) { return os.Executable() }

// readyAgain reports the pod Ready again, with its container running.
func readyAgain(p *corev1.Pod) {
	for i := range p.Status.Conditions {
		c := &p.Status.Conditions[i]
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			c.Status, c.LastTransitionTime = corev1.ConditionTrue, metav1.Now()
		}
	}
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].Ready = true
	}
}

// followReadiness is the kubelet's readiness probe of pod p, whose agent serves /readyz at
// probe (host:port): it asks every 100 ms (a real probe's periodSeconds 1 and
// failureThreshold 1, ten times faster) and reports the pod NotReady after a failure (no
// answer counts as one) and Ready again after a success, until the test's cleanup. Register
// it after startAgent, so that it stops first.
func (f *fixture) followReadiness(p *corev1.Pod, probe string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cur, ready := p, true
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			ok := httpStatus("http://"+probe+"/readyz") == http.StatusOK
			if ok == ready {
				continue
			}
			var next *corev1.Pod
			var err error
			if ok {
				next, err = f.kubelet.SetStatus(ctx, cur, readyAgain)
			} else {
				next, err = f.kubelet.NotReady(ctx, cur)
			}
			if err == nil {
				cur, ready = next, ok
			}
		}
	}()
	f.t.Cleanup(func() {
		cancel()
		<-done
	})
}

// probeAddress is a free local address for an agent's --probe-address.
func probeAddress(t *testing.T) string {
	t.Helper()
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0])
}
