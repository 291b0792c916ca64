//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// scenarioReadinessFails: the holder's readiness probe starts failing (its probe port is
// dropped inside the pod's network namespace): Releasing, then the lock delay.
func scenarioReadinessFails(t *testing.T, c *cluster, r *e2eReport) {
	l := c.steady(t)
	holder, tok := l.Status.Holder, l.Status.FencingToken
	pid := c.containerPID(t, c.getPod(t, workerNS, holder))
	rule := []string{"INPUT", "-p", "tcp", "--dport", "8081", "-j", "DROP"}
	m, t0 := c.rec.mark(), time.Now()
	if err := podInNetns(pid, append([]string{"iptables", "-I"}, rule...)...); err != nil {
		t.Fatalf("drop the holder's probe port: %v", err)
	}
	unblock := func() error { return podInNetns(pid, append([]string{"iptables", "-D"}, rule...)...) }
	blocked := true
	t.Cleanup(func() {
		if blocked {
			_ = unblock()
		}
	})
	c.rec.waitLock(t, lockName, 90*time.Second, "next term", func(l *lockv1.DistributedLock) bool {
		return isHeld(l) && l.Status.FencingToken > tok
	})
	if err := unblock(); err != nil {
		t.Errorf("restore the probe port: %v", err)
	}
	blocked = false
	pods, locks := c.rec.since(m)
	tm, nt := termOf(t, terms(locks), tok)
	for _, b := range checkNotAttested(tm, nt, watchSlack) {
		t.Error(b)
	}
	notReady := time.Time{}
	for _, p := range podEvents(pods, string(l.Status.HolderUID)) {
		if !podReady(p.Pod) {
			notReady = p.At
			break
		}
	}
	r.add("readiness-fails: probe port dropped at 0; pod NotReady %s; %v; next term (token %d) %s after Releasing",
		ms(notReady.Sub(t0)), tm, nt.Token, ms(nt.GrantedAt.Sub(tm.ReleasingAt)))
}

// scenarioKubeletStopped: the kubelet stopped (node lost): Releasing once the node
// controller marks the pod NotReady, then the lock delay; the detection time is reported.
func scenarioKubeletStopped(t *testing.T, c *cluster, r *e2eReport) {
	l := c.steady(t)
	uid, tok := string(l.Status.HolderUID), l.Status.FencingToken
	m, t0 := c.rec.mark(), time.Now()
	if out, err := c.n.script(nil, "component.sh", "stop", "kubelet"); err != nil {
		t.Fatalf("stop the kubelet: %v\n%s", err, out)
	}
	running := false
	t.Cleanup(func() {
		if !running {
			_, _ = c.n.script(nil, "component.sh", "start", "kubelet")
		}
	})
	rel := c.rec.waitLock(t, lockName, 3*time.Minute, "Releasing", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseReleasing || l.Status.FencingToken != tok
	})
	detected := time.Since(t0)
	// hold the kubelet down past the lock delay, so the term cannot simply bounce back
	time.Sleep(lockDelay + time.Second)
	if out, err := c.n.script(nil, "component.sh", "start", "kubelet"); err != nil {
		t.Fatalf("start the kubelet again: %v\n%s", err, out)
	}
	running = true
	c.rec.waitLock(t, lockName, 3*time.Minute, "Held after the kubelet is back", isHeld)
	pods, locks := c.rec.since(m)
	tm, nt := termOf(t, terms(locks), tok)
	for _, b := range checkNotAttested(tm, nt, watchSlack) {
		t.Error(b)
	}
	notReady := time.Time{}
	for _, p := range podEvents(pods, uid) {
		if !podReady(p.Pod) {
			notReady = p.At
			break
		}
	}
	next := "none yet"
	if nt != nil {
		next = fmt.Sprintf("token %d to %s, %s after Releasing", nt.Token, nt.Holder, ms(nt.GrantedAt.Sub(tm.ReleasingAt)))
	}
	r.add("kubelet-stopped: kubelet stopped at 0; node controller marked the holder NotReady %s; Releasing published %s (detection time); %s; next term: %s",
		ms(notReady.Sub(t0)), ms(detected), describeLock(rel), next)
}

// scenarioNodeDeleted: the Node object deleted. PodGC marks the pods Failed while their
// containers still run: not attestation. On one node the deletion would take the manager's
// own pods (and their tokens) with it, so for this scenario the manager runs beside the
// node, as the same binary with the ServiceAccount and RBAC of config/default.
func scenarioNodeDeleted(t *testing.T, c *cluster, r *e2eReport) {
	l := c.steady(t)
	holder, uid, tok := l.Status.Holder, string(l.Status.HolderUID), l.Status.FencingToken
	stopOutside := c.startOutsideManager(t)
	if out, err := c.n.kubectl(ctxFor(t, time.Minute), "-n", managerNS, "scale", "deployment/lockwarden-manager", "--replicas=0"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !poll(90*time.Second, func() bool { return c.activeManager(t) == "outside-manager" }) {
		t.Fatalf("the outside manager did not win the election within 90 s (holder %q); its log:\n%s",
			c.activeManager(t), tail(filepath.Join(c.n.dir, "logs", "outside-manager.log"), 30))
	}
	restore := func() {
		if out, err := c.n.kubectl(ctxFor(t, time.Minute), "-n", managerNS, "scale", "deployment/lockwarden-manager", "--replicas=2"); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
		if out, err := c.n.kubectl(ctxFor(t, 4*time.Minute), "-n", managerNS, "rollout", "status", "deployment/lockwarden-manager", "--timeout=180s"); err != nil {
			t.Errorf("the manager did not come back: %v\n%s", err, out)
		}
		stopOutside()
	}
	defer restore()

	m, t0 := c.rec.mark(), time.Now()
	if out, err := c.n.kubectl(ctxFor(t, time.Minute), "delete", "node", "lw-node"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var podgc time.Time
	eventually(t, 3*time.Minute, "PodGC marking the holder Failed", func() bool {
		pods, _ := c.rec.since(m)
		for _, p := range podEvents(pods, uid) {
			if p.Pod.Status.Phase == corev1.PodFailed {
				podgc = p.At
				if !anyRunning(p.Pod) {
					t.Logf("PodGC's Failed update of %s shows no running container (the rule is then not exercised): %s", holder, describePod(p, t0))
				}
				return true
			}
		}
		return false
	})
	c.rec.waitLock(t, lockName, time.Minute, "the term ending", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseReleasing || l.Status.FencingToken != tok
	})
	// the kubelet registers its node again when it starts
	if out, err := c.n.script(nil, "component.sh", "stop", "kubelet"); err != nil {
		t.Fatalf("stop the kubelet: %v\n%s", err, out)
	}
	if out, err := c.n.script(nil, "component.sh", "start", "kubelet"); err != nil {
		t.Fatalf("start the kubelet: %v\n%s", err, out)
	}
	next := c.rec.waitLock(t, lockName, 3*time.Minute, "next term", func(l *lockv1.DistributedLock) bool {
		return isHeld(l) && l.Status.FencingToken > tok
	})
	pods, locks := c.rec.since(m)
	tm, nt := termOf(t, terms(locks), tok)
	for _, b := range checkNotAttested(tm, nt, watchSlack) {
		t.Error(b)
	}
	r.file("watch-node-deleted.txt", timeline(podEvents(pods, uid), locks, t0))
	r.add("node-deleted: Node deleted at 0; PodGC marked the holder Failed %s; %v; next holder %s (token %d) %s",
		ms(podgc.Sub(t0)), tm, next.Status.Holder, next.Status.FencingToken, ms(nt.GrantedAt.Sub(t0)))
}

// startOutsideManager runs bin/images/lockwarden (the image's binary) beside the node, in its
// network namespace, with a token of the lockwarden-manager ServiceAccount, and returns its
// stop (SIGTERM, which releases the election, then wait).
func (c *cluster) startOutsideManager(t testing.TB) func() {
	t.Helper()
	ctx := ctxFor(t, time.Minute)
	exp := int64(3600)
	tr, err := c.n.kube.CoreV1().ServiceAccounts(managerNS).CreateToken(ctx, "lockwarden-manager",
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for lockwarden-manager: %v", err)
	}
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: "node", cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: "manager", user: {token: %s}}]
contexts: [{name: "e2e", context: {cluster: "node", user: "manager"}}]
current-context: "e2e"
`, tr.Status.Token)), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(c.n.dir, "logs", "outside-manager.log"))
	if err != nil {
		t.Fatal(err)
	}
	p := c.etcd.pki.dir
	bin := filepath.Join(c.n.root, "bin", "images", "lockwarden")
	if b := os.Getenv("E2E_MANAGER_BIN"); b != "" {
		bin = b // the binary of E2E_MANAGER_IMAGE
	}
	cmd := exec.Command("nsenter", "--net="+c.n.ns.path, "--", bin,
		"--kubeconfig", kc, "--identity", "outside-manager",
		"--etcd-endpoints", strings.Join(c.etcd.endpoints, ","), "--etcd-ca-file", filepath.Join(p, "ca.crt"),
		"--etcd-cert-file", filepath.Join(p, "client.crt"), "--etcd-key-file", filepath.Join(p, "client.key"),
		"--metrics-bind-address", "0", "--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(18081))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the outside manager: %v", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = log.Close()
	}
	t.Cleanup(stop)
	return stop
}
