//go:build e2e

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNodeLifecycle starts a node, runs a real pod on it, checks that up.sh is idempotent
// and refuses without root, then stops the node twice and checks that no process, mount,
// cgroup or folder of it is left.
func TestNodeLifecycle(t *testing.T) {
	n := startNode(t, "lockwarden-e2e-lifecycle")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	out, err := n.script(nil, "up.sh")
	if err != nil || !strings.Contains(out, "node already running") {
		t.Errorf("up.sh on a running node = %v, output %q; want success and \"node already running\"", err, out)
	}
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", filepath.Join(n.root, "hack", "node", "up.sh"))
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
	// the pod's processes are in the node's cgroups: the stop below must remove them
	if n.leftovers() == nil {
		t.Fatal("a running node shows no process, cgroup or folder: the leftover check cannot see anything")
	}

	n.stop(t) // asserts nothing is left
	n.stop(t) // and a second stop is harmless
}
