//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeLifecycle starts a node, runs a real pod on it, checks that up.sh is idempotent
// and refuses without root, restarts a component with component.sh, runs demo.sh (make
// node-demo), then stops the node twice and checks that no process, mount, cgroup or folder
// of it is left.
func TestNodeLifecycle(t *testing.T) {
	n := startNode(t, "lockwarden-e2e-lifecycle")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	out, err := n.script(nil, "up.sh")
	if err != nil || !strings.Contains(out, "node already running") {
		t.Errorf("up.sh on a running node = %v, output %q; want success and \"node already running\"", err, out)
	}
	// The refusal runs from a copy that uid 65534 can read: a clone in a folder only root may
	// enter (mktemp -d makes 0700) would refuse it before the script runs at all.
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", readableCopy(t, n.root, "up.sh", "lib.sh"))
	cmd.Env = n.environ(nil)
	refusal, err := cmd.CombinedOutput()
	if lines := strings.Split(strings.TrimSpace(string(refusal)), "\n"); err == nil || len(lines) != 1 || !strings.Contains(lines[0], "needs root") {
		t.Errorf("up.sh as uid 65534 = %v, output %q; want a failure with one line saying it needs root", err, refusal)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pause", Namespace: "default"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "pause", Image: "localhost/lockwarden/pause:1", ImagePullPolicy: corev1.PullNever,
		}}},
	}
	if _, err := n.kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	start := time.Now()
	if _, err := n.kubectl(ctx, "wait", "--for=condition=Ready", "pod/pause", "--timeout=90s"); err != nil {
		t.Fatalf("the pod did not become Ready: %v", err)
	}
	t.Logf("pod Ready %v after create", time.Since(start).Round(time.Millisecond))
	got, err := n.kube.CoreV1().Pods("default").Get(ctx, "pause", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.PodIP == "" || !strings.HasPrefix(got.Status.PodIP, "10.251.0.") {
		t.Errorf("pod IP = %q, want one from the CNI range 10.251.0.0/24", got.Status.PodIP)
	}
	// component.sh as the README and make targets call it: by a path relative to the repo
	// (nsenter --mount does not keep the working directory)
	before, _ := os.ReadFile(filepath.Join(n.dir, "run", "kube-scheduler.pid"))
	for _, verb := range []string{"stop", "start"} {
		cmd := exec.Command("hack/node/component.sh", verb, "kube-scheduler")
		cmd.Dir, cmd.Env = n.root, n.environ(nil)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/node/component.sh %s kube-scheduler: %v\n%s", verb, err, out)
		}
	}
	after, _ := os.ReadFile(filepath.Join(n.dir, "run", "kube-scheduler.pid"))
	if pid, err := strconv.Atoi(strings.TrimSpace(string(after))); err != nil || string(after) == string(before) || syscall.Kill(pid, 0) != nil {
		t.Errorf("kube-scheduler pid %q before, %q after a restart (%v): want a new, live process", before, after, err)
	}

	// make node-demo: etcd, the manager and the fenced-worker, by hand; down.sh stops them too
	start = time.Now()
	out, err = n.script(nil, "demo.sh")
	if err != nil {
		t.Fatalf("hack/node/demo.sh: %v\n%s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(out), "\n"); !strings.Contains(lines[len(lines)-1], "Held") {
		t.Errorf("hack/node/demo.sh ends with %q, want the lock Held", lines[len(lines)-1])
	}
	t.Logf("hack/node/demo.sh: lock Held %v after start", time.Since(start).Round(time.Millisecond))

	// the pod's processes are in the node's cgroups: the stop below must remove them
	if n.leftovers() == nil {
		t.Fatal("a running node shows no process, cgroup or folder: the leftover check cannot see anything")
	}

	n.stop(t) // asserts nothing is left
	n.stop(t) // and a second stop is harmless
}

// readableCopy copies the named hack/node scripts into a new folder that every user may read
// and returns the path of the first one; the folder is removed when the test ends.
func readableCopy(t *testing.T, root string, names ...string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "lockwarden-e2e-scripts-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	node := filepath.Join(dir, "hack", "node")
	if err := os.MkdirAll(node, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, filepath.Join(dir, "hack"), node} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join(root, "hack", "node", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(node, name), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(node, names[0])
}
