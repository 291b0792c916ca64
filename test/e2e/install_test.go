//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

const (
	installOverlay = "config/e2e-embedded"
	demoNS         = "install-demo"
	demoLock       = "demo-leader"
	dataClaim      = "lockwarden-etcd-data" // config/default/etcd_data_pvc.yaml
	// unfinalizeAll is the documented way out when the manager is gone (docs/install.md,
	// "Uninstall"): drop the finalizer of every DistributedLock.
	unfinalizeAll = `kubectl get distributedlocks.lockwarden.io -A -o jsonpath='{range .items[*]}{.metadata.namespace}{" "}{.metadata.name}{"\n"}{end}' |
  while read -r ns name; do kubectl patch distributedlocks.lockwarden.io -n "$ns" "$name" --type=json -p '[{"op":"remove","path":"/metadata/finalizers"}]'; done`
)

// TestInstallEmbedded is the install path of docs/install.md on a real node, with the make
// targets a user runs: `make install` (the CRD), `make deploy` of the default (one manager
// with its embedded etcd on a PersistentVolume) until it grants a lock to a real pod and
// keeps its tokens across a restart of its pod, `make undeploy` leaving nothing stuck; then
// the same install torn down with the manager already gone (the Deployment deleted first,
// the finalizers dropped by the documented one-liner); and the Helm chart's install and
// uninstall of the same default.
func TestInstallEmbedded(t *testing.T) {
	n := startNode(t, "lockwarden-e2e-install")
	ctx := ctxFor(t, 10*time.Minute)

	makeOK(t, n, "install")
	if _, err := n.kubectl(ctx, "wait", "--for=condition=Established", "crd/distributedlocks.lockwarden.io", "--timeout=60s"); err != nil {
		t.Fatalf("the CRD is not Established after make install: %v", err)
	}
	if _, err := n.kube.CoreV1().Namespaces().Get(ctx, managerNS, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s after make install: %v; want NotFound (install is the CRD only)", managerNS, err)
	}

	t.Run("deploy-grant-undeploy", func(t *testing.T) {
		deployEmbedded(ctx, t, n, "pv-1")
		first := grantToRealPod(ctx, t, n)
		checkAggregatedRoles(ctx, t, n)
		restartKeepsTokens(ctx, t, n, first)

		start := time.Now()
		out := makeOK(t, n, "undeploy", "DEPLOY_DIR="+installOverlay)
		t.Logf("make undeploy took %v:\n%s", time.Since(start).Round(time.Millisecond), out)
		checkNothingLeft(ctx, t, n)
		deletePV(ctx, t, n, "pv-1")
	})

	t.Run("uninstall-with-manager-gone", func(t *testing.T) {
		makeOK(t, n, "install")
		deployEmbedded(ctx, t, n, "pv-2")
		grantToRealPod(ctx, t, n)

		if _, err := n.kubectl(ctx, "-n", managerNS, "delete", "deployment/lockwarden-manager", "--wait", "--timeout=90s"); err != nil {
			t.Fatalf("delete the manager Deployment: %v", err)
		}
		eventually(t, 90*time.Second, "manager pod gone", func() bool {
			return len(podsOf(t, n, managerNS, "app.kubernetes.io/name=lockwarden")) == 0
		})
		// Without the manager nothing removes the finalizer: a delete waits for good, and
		// make uninstall refuses rather than leave the CRD stuck.
		if _, err := n.kubectl(ctx, "-n", demoNS, "delete", "distributedlock", demoLock, "--timeout=5s"); err == nil {
			t.Fatalf("kubectl delete of a held lock with the manager gone returned at once: want it held by its finalizer")
		}
		if out, err := makeIn(n, "uninstall"); err == nil || !strings.Contains(out, "DistributedLocks are left") {
			t.Errorf("make uninstall with a lock left = %v, output:\n%s\nwant a refusal naming the locks left", err, out)
		}

		bash := exec.Command("nsenter", "--net="+n.ns.path, "--", "bash", "-euo", "pipefail", "-c", unfinalizeAll)
		bash.Env, bash.Dir = makeEnv(n), n.root
		if out, err := bash.CombinedOutput(); err != nil {
			t.Fatalf("the documented unfinalize one-liner: %v\n%s", err, out)
		} else {
			t.Logf("unfinalize one-liner:\n%s", out)
		}
		eventually(t, 30*time.Second, "the deleted lock gone once unfinalized", func() bool {
			_, err := getLock(ctx, n, demoNS, demoLock)
			return apierrors.IsNotFound(err)
		})
		makeOK(t, n, "undeploy", "DEPLOY_DIR="+installOverlay)
		makeOK(t, n, "uninstall") // the CRD is gone already: a no-op that succeeds
		checkNothingLeft(ctx, t, n)
		deletePV(ctx, t, n, "pv-2")
	})

	t.Run("helm-install-uninstall", func(t *testing.T) {
		helmInstall(ctx, t, n, "pv-3")
		grantToRealPod(ctx, t, n)
		if _, err := n.kubectl(ctx, "delete", "distributedlocks.lockwarden.io", "--all", "-A", "--wait", "--timeout=2m"); err != nil {
			t.Fatalf("delete every lock while the manager runs: %v", err)
		}
		if out, err := helmIn(t, n, "uninstall", "lockwarden", "-n", managerNS, "--wait", "--timeout", "3m"); err != nil {
			t.Fatalf("helm uninstall: %v\n%s", err, out)
		}
		makeOK(t, n, "uninstall") // Helm never deletes the CRDs of crds/
		if _, err := n.kubectl(ctx, "delete", "namespace", managerNS, "--wait", "--timeout=90s"); err != nil {
			t.Fatalf("delete the namespace helm install --create-namespace made: %v", err)
		}
		checkNothingLeft(ctx, t, n)
		deletePV(ctx, t, n, "pv-3")
	})
}

// helmInstall installs charts/lockwarden (mode embedded, the default values) with ./bin/helm
// as docs/install.md does, with only what the node needs set: the image, never pulled, and
// the in-cluster API server address (no kube-proxy).
func helmInstall(ctx context.Context, t *testing.T, n *node, pvName string) {
	t.Helper()
	makePV(ctx, t, n, pvName)
	start := time.Now()
	out, err := helmIn(t, n, "install", "lockwarden", filepath.Join(n.root, "charts", "lockwarden"),
		"-n", managerNS, "--create-namespace", "--wait", "--timeout", "3m",
		"--set", "image.repository=localhost/lockwarden", "--set", "image.pullPolicy=Never",
		"--set-json", `extraEnv=[{"name":"KUBERNETES_SERVICE_HOST","value":"`+nodeIP+`"},{"name":"KUBERNETES_SERVICE_PORT","value":"6443"}]`)
	if err != nil {
		t.Fatalf("helm install: %v\n%s\n%s", err, out, describeNS(ctx, n, managerNS))
	}
	managers := podsOf(t, n, managerNS, "app.kubernetes.io/name=lockwarden")
	if len(managers) != 1 || !podReady(&managers[0]) {
		t.Fatalf("%d manager pods after helm install --wait, want 1 Ready\n%s", len(managers), describeNS(ctx, n, managerNS))
	}
	t.Logf("helm install to 1 Ready manager: %v", time.Since(start).Round(time.Millisecond))
	n.waitLockAdmission(t)
}

// helmIn runs ./bin/helm (make helm) against the node, inside its network namespace, with a
// Helm home of its own.
func helmIn(t *testing.T, n *node, args ...string) (string, error) {
	t.Helper()
	helm := filepath.Join(n.root, "bin", "helm")
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("%s not found: run `make helm`", helm)
	}
	home := t.TempDir()
	cmd := exec.Command("nsenter", append([]string{"--net=" + n.ns.path, "--", helm}, args...)...)
	cmd.Env = append(makeEnv(n), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	cmd.Dir = n.root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// deployEmbedded makes a hostPath PersistentVolume for the manager's claim (the node has no
// provisioner), then runs `make deploy` of the e2e overlay of config/default and checks what
// it runs.
func deployEmbedded(ctx context.Context, t *testing.T, n *node, pvName string) {
	t.Helper()
	dir := makePV(ctx, t, n, pvName)
	start := time.Now()
	if out, err := makeIn(n, "deploy", "DEPLOY_DIR="+installOverlay); err != nil {
		t.Fatalf("make deploy DEPLOY_DIR=%s: %v\n%s\n%s", installOverlay, err, out, describeNS(ctx, n, managerNS))
	}
	managers := podsOf(t, n, managerNS, "app.kubernetes.io/name=lockwarden")
	if len(managers) != 1 || !podReady(&managers[0]) {
		t.Fatalf("%d manager pods after make deploy, want 1 Ready\n%s", len(managers), describeNS(ctx, n, managerNS))
	}
	t.Logf("make deploy of %s to 1 Ready manager: %v", installOverlay, time.Since(start).Round(time.Millisecond))
	if _, err := os.Stat(filepath.Join(dir, "etcd", "member", "wal")); err != nil {
		t.Errorf("the embedded etcd's WAL is not on the PersistentVolume: %v", err)
	}
}

// makePV makes a hostPath PersistentVolume bound to the manager's claim, on a fresh folder
// owned by the manager's uid, and returns the folder.
func makePV(ctx context.Context, t *testing.T, n *node, pvName string) string {
	t.Helper()
	dir := filepath.Join(n.dir, pvName)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			ClaimRef:                      &corev1.ObjectReference{Namespace: managerNS, Name: dataClaim},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
		},
	}
	if _, err := n.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create PersistentVolume %s: %v", pvName, err)
	}
	return dir
}

// grantToRealPod runs two pause pods under a DistributedLock and returns it once the
// manager published one of them as holder.
func grantToRealPod(ctx context.Context, t *testing.T, n *node) *lockv1.DistributedLock {
	t.Helper()
	manifest := fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: lockwarden.io/v1alpha1
kind: DistributedLock
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  candidates: {selector: {matchLabels: {app: demo}}}
  leaseDurationSeconds: 2
  lockDelaySeconds: 3
`, demoNS, demoLock)
	for _, p := range []string{"demo-a", "demo-b"} {
		manifest += fmt.Sprintf(`---
apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: %s, labels: {app: demo}}
spec:
  terminationGracePeriodSeconds: 5
  containers: [{name: pause, image: localhost/lockwarden/pause:1, imagePullPolicy: Never}]
`, p, demoNS)
	}
	if out, err := applyStdin(n, manifest); err != nil {
		t.Fatalf("kubectl apply the demo lock and pods: %v\n%s", err, out)
	}
	start := time.Now()
	l := waitHeld(ctx, t, n, 90*time.Second, func(*lockv1.DistributedLock) bool { return true })
	p, err := n.kube.CoreV1().Pods(demoNS).Get(ctx, l.Status.Holder, metav1.GetOptions{})
	if err != nil || p.UID != l.Status.HolderUID || !podReady(p) {
		t.Fatalf("lock held by %s (UID %s), but that pod is %v (err %v); want the Ready pod of that UID", l.Status.Holder, l.Status.HolderUID, p, err)
	}
	t.Logf("lock %s Held by pod %s with token %d, %v after apply", demoLock, l.Status.Holder, l.Status.FencingToken, time.Since(start).Round(time.Millisecond))
	return l
}

// checkAggregatedRoles: a namespace user with the built-in `view` role can read locks, one
// with `edit` can patch a lock but not its status.
func checkAggregatedRoles(ctx context.Context, t *testing.T, n *node) {
	t.Helper()
	for _, b := range [][2]string{{"alice", "view"}, {"bob", "edit"}} {
		if _, err := n.kubectl(ctx, "-n", demoNS, "create", "rolebinding", b[0], "--clusterrole="+b[1], "--user="+b[0]); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "view and edit aggregating the lockwarden roles", func() bool {
		_, err1 := n.kubectl(ctx, "--as=alice", "-n", demoNS, "get", "dlock", demoLock)
		_, err2 := n.kubectl(ctx, "--as=bob", "-n", demoNS, "annotate", "dlock", demoLock, "example.com/owner=bob", "--overwrite")
		return err1 == nil && err2 == nil
	})
	if _, err := n.kubectl(ctx, "--as=alice", "-n", demoNS, "annotate", "dlock", demoLock, "example.com/viewer=alice", "--overwrite"); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("a `view` user annotating a lock: %v; want forbidden", err)
	}
	if _, err := n.kubectl(ctx, "--as=bob", "-n", demoNS, "patch", "dlock", demoLock, "--subresource=status", "--type=merge", "-p", `{"status":{"holder":"bob"}}`); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("an `edit` user patching distributedlocks/status: %v; want forbidden (only the manager writes status)", err)
	}
}

// restartKeepsTokens deletes the one manager pod (Recreate brings up another on the same
// volume) and hands the lock over: the next token is above the last one, which a fresh,
// empty etcd would not give (TokenRegression).
func restartKeepsTokens(ctx context.Context, t *testing.T, n *node, before *lockv1.DistributedLock) {
	t.Helper()
	old := podsOf(t, n, managerNS, "app.kubernetes.io/name=lockwarden")[0]
	if _, err := n.kubectl(ctx, "-n", managerNS, "delete", "pod", old.Name, "--wait"); err != nil {
		t.Fatalf("delete the manager pod: %v", err)
	}
	if _, err := n.kubectl(ctx, "-n", managerNS, "rollout", "status", "deployment/lockwarden-manager", "--timeout=120s"); err != nil {
		t.Fatalf("no new manager pod: %v\n%s", err, describeNS(ctx, n, managerNS))
	}
	if _, err := n.kubectl(ctx, "-n", demoNS, "delete", "pod", before.Status.Holder, "--wait=false"); err != nil {
		t.Fatalf("delete the holder: %v", err)
	}
	after := waitHeld(ctx, t, n, 90*time.Second, func(l *lockv1.DistributedLock) bool { return l.Status.HolderUID != before.Status.HolderUID })
	if after.Status.FencingToken <= before.Status.FencingToken || after.Status.ControllerEpoch <= before.Status.ControllerEpoch {
		t.Errorf("after a manager restart and a hand-over: token %d, epoch %d; want above %d and %d (the etcd data survived on the volume)",
			after.Status.FencingToken, after.Status.ControllerEpoch, before.Status.FencingToken, before.Status.ControllerEpoch)
	}
	t.Logf("manager pod restarted, lock handed over from %s (token %d, epoch %d) to %s (token %d, epoch %d)",
		before.Status.Holder, before.Status.FencingToken, before.Status.ControllerEpoch, after.Status.Holder, after.Status.FencingToken, after.Status.ControllerEpoch)
}

// checkNothingLeft: no CRD, no lockwarden namespace, no cluster-wide object of the install,
// and the demo namespace deletes cleanly (nothing holds it).
func checkNothingLeft(ctx context.Context, t *testing.T, n *node) {
	t.Helper()
	if out, err := n.kubectl(ctx, "get", "crd", "distributedlocks.lockwarden.io", "--ignore-not-found", "-o", "name"); err != nil || out != "" {
		t.Errorf("CRD after undeploy: %q, %v; want none", out, err)
	}
	if _, err := n.kube.CoreV1().Namespaces().Get(ctx, managerNS, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("namespace %s after undeploy: %v; want it gone, not Terminating", managerNS, err)
	}
	for _, kind := range []string{"clusterroles", "clusterrolebindings"} {
		out, err := n.kubectl(ctx, "get", kind, "-o", "name")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Fields(out) {
			if strings.Contains(l, "lockwarden") {
				t.Errorf("%s left after undeploy", l)
			}
		}
	}
	if _, err := n.kubectl(ctx, "delete", "namespace", demoNS, "--wait", "--timeout=60s"); err != nil {
		t.Errorf("delete namespace %s: %v", demoNS, err)
	}
}

// deletePV deletes the test's PersistentVolume (Released once its claim went with the
// namespace).
func deletePV(ctx context.Context, t *testing.T, n *node, name string) {
	t.Helper()
	if err := n.kube.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete PersistentVolume %s: %v", name, err)
	}
}

// waitHeld waits until the demo lock is Held by a pod and ok accepts it.
func waitHeld(ctx context.Context, t *testing.T, n *node, timeout time.Duration, ok func(*lockv1.DistributedLock) bool) *lockv1.DistributedLock {
	t.Helper()
	var last *lockv1.DistributedLock
	if poll(timeout, func() bool {
		l, err := getLock(ctx, n, demoNS, demoLock)
		if err != nil {
			return false
		}
		last = l
		return isHeld(l) && l.Status.FencingToken > 0 && ok(l)
	}) {
		return last
	}
	t.Fatalf("lock %s not held as wanted within %v; last %s\n%s", demoLock, timeout, describeLock(last), describeNS(ctx, n, managerNS))
	return nil
}

// getLock reads a DistributedLock from the API server through the node's REST client.
func getLock(ctx context.Context, n *node, ns, name string) (*lockv1.DistributedLock, error) {
	body, err := n.kube.RESTClient().Get().AbsPath("/apis/lockwarden.io/v1alpha1/namespaces", ns, "distributedlocks", name).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var l lockv1.DistributedLock
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, fmt.Errorf("decode lock %s/%s: %w", ns, name, err)
	}
	return &l, nil
}

// podsOf lists the pods of ns matching selector that are not being deleted.
func podsOf(t *testing.T, n *node, ns, selector string) []corev1.Pod {
	t.Helper()
	return (&cluster{n: n}).pods(t, ns, selector)
}

// describeNS is `kubectl get pods,pvc -o wide` and the recent events of ns, for failure messages.
func describeNS(ctx context.Context, n *node, ns string) string {
	objs, _ := n.kubectl(ctx, "-n", ns, "get", "pods,pvc", "-o", "wide")
	return objs + (&cluster{n: n}).describe(ctx, ns)
}

// makeEnv is the environment of a make target run against the node: its admin kubeconfig
// as the current one, ./bin first on PATH (the one-liner's kubectl is ./bin/kubectl).
func makeEnv(n *node) []string {
	return append(os.Environ(), "KUBECONFIG="+filepath.Join(n.dir, "pki", "admin.kubeconfig"), "PATH="+filepath.Join(n.root, "bin")+":"+os.Getenv("PATH"))
}

// makeIn runs `make <args>` in the repository, inside the node's network namespace (where
// its API server is), as a user of that cluster would.
func makeIn(n *node, args ...string) (string, error) {
	cmd := exec.Command("nsenter", append([]string{"--net=" + n.ns.path, "--", "make", "--no-print-directory"}, args...)...)
	cmd.Env, cmd.Dir = makeEnv(n), n.root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// makeOK is makeIn that fails the test on an error.
func makeOK(t *testing.T, n *node, args ...string) string {
	t.Helper()
	out, err := makeIn(n, args...)
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// applyStdin is `kubectl apply -f -` of manifest against the node.
func applyStdin(n *node, manifest string) (string, error) {
	cmd := exec.Command(filepath.Join(n.root, "hack", "node", "kubectl"), "apply", "-f", "-")
	cmd.Env, cmd.Dir = n.environ(nil), n.root
	cmd.Stdin = strings.NewReader(manifest)
	out, err := cmd.CombinedOutput()
	return string(out), err
}
