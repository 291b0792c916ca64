//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/examples/fenced-worker/ledger"
)

const (
	managerNS  = "lockwarden-system"
	workerNS   = "fenced-demo"
	lockName   = "ledger-writer"
	lockDelay  = 6 * time.Second // test/e2e/testdata/worker: lockDelaySeconds
	ledgerAddr = nodeIP + ":8090"
)

// cluster is the node with lockwarden deployed as a user would: etcd beside it, the
// manager from config/e2e, and the fenced-worker with its ledger.
type cluster struct {
	n      *node
	etcd   *etcdCluster
	ledger *ledger.Server
	held   *heldWrites // in front of the ledger: can hold one append (latewrite_test.go)
	cg     *writeSink  // the client-go workers' writes (bench_test.go), under /cg/
	rec    *recorder
}

// deploy brings up the deploy path on n: the 3-member TLS etcd and the
// lockwarden-etcd-client Secret, `kubectl apply -k config/e2e` until both manager replicas
// are Ready, the ledger, and the three workers until the lock is held.
func deploy(t testing.TB, n *node) *cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := &cluster{n: n}
	start := time.Now()
	c.etcd = startEtcd(t, n)
	t.Logf("3-member etcd with TLS client certificates up in %v", time.Since(start).Round(time.Millisecond))

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: managerNS, Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}
	if _, err := n.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", managerNS, err)
	}
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(c.etcd.pki.dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "lockwarden-etcd-client", Namespace: managerNS},
		Data:       map[string][]byte{"ca.crt": read("ca.crt"), "tls.crt": read("client.crt"), "tls.key": read("client.key")},
	}
	if _, err := n.kube.CoreV1().Secrets(managerNS).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the lockwarden-etcd-client Secret: %v", err)
	}
	if tarball := os.Getenv("E2E_MANAGER_IMAGE"); tarball != "" {
		// another manager build under the same name, e.g. an older commit's, to see a
		// scenario fail before a fix
		if out, err := n.script(nil, "ctr", "images", "import", tarball); err != nil {
			t.Fatalf("import E2E_MANAGER_IMAGE %s: %v\n%s", tarball, err, out)
		}
		t.Logf("manager image from E2E_MANAGER_IMAGE=%s", tarball)
	}
	if tarball := os.Getenv("E2E_WORKER_IMAGE"); tarball != "" {
		// another fenced-worker build under the same name (localhost/fenced-worker:dev), e.g.
		// an older commit's, to see a scenario fail before a fix
		if out, err := n.script(nil, "ctr", "images", "import", tarball); err != nil {
			t.Fatalf("import E2E_WORKER_IMAGE %s: %v\n%s", tarball, err, out)
		}
		t.Logf("fenced-worker image from E2E_WORKER_IMAGE=%s", tarball)
	}
	start = time.Now()
	if out, err := n.kubectl(ctx, "apply", "-k", "config/e2e"); err != nil {
		t.Fatalf("kubectl apply -k config/e2e: %v\n%s", err, out)
	}
	if out, err := n.kubectl(ctx, "-n", managerNS, "rollout", "status", "deployment/lockwarden-manager", "--timeout=180s"); err != nil {
		t.Fatalf("the manager did not roll out: %v\n%s\n%s", err, out, c.describe(ctx, managerNS))
	}
	managers := c.pods(t, managerNS, "app.kubernetes.io/name=lockwarden")
	if len(managers) != 2 {
		t.Fatalf("%d manager pods, want the 2 replicas of config/default", len(managers))
	}
	for _, p := range managers {
		if !podReady(&p) || p.Spec.SecurityContext == nil || p.Spec.SecurityContext.RunAsNonRoot == nil || !*p.Spec.SecurityContext.RunAsNonRoot {
			t.Errorf("manager pod %s: ready %v, securityContext %+v; want Ready, runAsNonRoot", p.Name, podReady(&p), p.Spec.SecurityContext)
		}
	}
	t.Logf("kubectl apply -k config/e2e to 2 Ready manager replicas: %v", time.Since(start).Round(time.Millisecond))

	c.ledger = ledger.New()
	c.held = newHeldWrites(c.ledger)
	c.cg = &writeSink{}
	l, err := n.ns.Listen("tcp", ledgerAddr)
	if err != nil {
		t.Fatalf("listen for the ledger on %s in the node's namespace: %v", ledgerAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/cg/", c.cg)
	mux.Handle("/", c.held)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		_ = srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("ledger: %v", err)
		}
	})

	// The workers confirm their own release (the fenced-worker's default): the holder-release
	// annotation is admitted only under config/policy, which lets a pod change nothing else.
	if out, err := n.kubectl(ctx, "apply", "-k", "config/policy"); err != nil {
		t.Fatalf("kubectl apply -k config/policy: %v\n%s", err, out)
	}
	n.waitLockAdmission(t)
	c.rec = startRecorder(t, n, workerNS)
	start = time.Now()
	if out, err := n.kubectl(ctx, "apply", "-k", "test/e2e/testdata/worker"); err != nil {
		t.Fatalf("kubectl apply -k test/e2e/testdata/worker: %v\n%s", err, out)
	}
	if out, err := n.kubectl(ctx, "-n", workerNS, "rollout", "status", "deployment/fenced-worker", "--timeout=120s"); err != nil {
		t.Fatalf("the fenced-worker did not roll out: %v\n%s\n%s", err, out, c.describe(ctx, workerNS))
	}
	held := c.rec.waitLock(t, lockName, 60*time.Second, "holder", isHeld)
	t.Logf("fenced-worker applied to lock held by %s (token %d): %v", held.Status.Holder, held.Status.FencingToken, time.Since(start).Round(time.Millisecond))
	return c
}

// isHeld reports a lock published Held by some pod.
func isHeld(l *lockv1.DistributedLock) bool {
	return l.Status.Phase == lockv1.PhaseHeld && l.Status.HolderUID != ""
}

// podReady reports the pod's Ready condition.
func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// pods lists the pods of ns matching selector, not being deleted.
func (c *cluster) pods(t testing.TB, ns, selector string) []corev1.Pod {
	t.Helper()
	sel, err := labels.Parse(selector)
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.n.kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		t.Fatalf("list pods: %v", err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// steady waits until the lock is Held and three worker pods are Ready: the start of every
// scenario.
func (c *cluster) steady(t testing.TB) *lockv1.DistributedLock {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ready := 0
		for _, p := range c.pods(t, workerNS, "app=fenced-worker") {
			if podReady(&p) {
				ready++
			}
		}
		if l := c.rec.lastLock(lockName); ready == 3 && l != nil && isHeld(l) {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("no steady state (3 Ready workers, lock Held) within 2 minutes: %d Ready, lock %s\n%s",
				ready, describeLock(c.rec.lastLock(lockName)), c.describe(context.Background(), workerNS))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// describe is `kubectl get pods -o wide` and the recent events of ns, for failure messages.
func (c *cluster) describe(ctx context.Context, ns string) string {
	pods, _ := c.n.kubectl(ctx, "-n", ns, "get", "pods", "-o", "wide")
	events, _ := c.n.kubectl(ctx, "-n", ns, "get", "events", "--sort-by=.lastTimestamp")
	lines := strings.Split(strings.TrimSpace(events), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return pods + strings.Join(lines, "\n")
}

// outcomes is the ledger's record of its decisions.
func (c *cluster) outcomes(t testing.TB) []ledger.Outcome {
	t.Helper()
	rr := httptest.NewRecorder()
	c.ledger.Handler().ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/outcomes", nil))
	var outs []ledger.Outcome
	if err := json.Unmarshal(rr.Body.Bytes(), &outs); err != nil {
		t.Fatalf("ledger outcomes: %v", err)
	}
	return outs
}
