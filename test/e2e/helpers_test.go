//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/lockwarden/lockwarden/controllers"
	"github.com/lockwarden/lockwarden/pkg/fence/writer"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// allTerminated reports whether every container status of the pod says terminated.
func allTerminated(p *corev1.Pod) bool {
	if len(p.Status.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Terminated == nil {
			return false
		}
	}
	return true
}

// anyRunning reports whether some container status of the pod says running.
func anyRunning(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil {
			return true
		}
	}
	return false
}

// getPod reads a pod from the API server.
func (c *cluster) getPod(t testing.TB, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := c.n.kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod %s/%s: %v", ns, name, err)
	}
	return p
}

// containerPID is the host PID of the pod's first container's process (from containerd).
func (c *cluster) containerPID(t testing.TB, p *corev1.Pod) int {
	t.Helper()
	if len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s has no container status", p.Name)
	}
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	out, err := c.n.script(nil, "ctr", "tasks", "ls")
	if err != nil {
		t.Fatalf("ctr tasks ls: %v\n%s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == id {
			pid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("ctr tasks ls: pid %q of %s: %v", f[1], id, err)
			}
			return pid
		}
	}
	t.Fatalf("container %s of pod %s is not among containerd's tasks:\n%s", id, p.Name, out)
	return 0
}

// activeManager is the name in the etcd election of the replica that reconciles.
func (c *cluster) activeManager(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The engine's own read: the election's grant is the lock key or, after a handoff to a
	// blocking Acquire, that waiter's queue entry (pkg/lease owner.go), never only the key.
	h, err := lease.NewEngine(c.etcd.client).Inspect(ctx, controllers.ElectionKey)
	if err != nil {
		t.Fatalf("read the election: %v", err)
	}
	return h.Holder
}

// managerPodOf maps an election identity (hostname-pid, the hostname being the pod name) to
// the manager pod's name, or "".
func (c *cluster) managerPodOf(t testing.TB, identity string) string {
	t.Helper()
	for _, p := range c.pods(t, managerNS, "app.kubernetes.io/name=lockwarden") {
		if identity == p.Name || strings.HasPrefix(identity, p.Name+"-") {
			return p.Name
		}
	}
	return ""
}

// eventually polls cond every 100 ms until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, desc string, cond func() bool) {
	t.Helper()
	if !poll(timeout, cond) {
		t.Fatalf("no %s within %v", desc, timeout)
	}
}

// poll reports whether cond held within timeout, asking every 100 ms.
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// tail is the last n lines of a file, for failure messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// acceptedSince reports whether the ledger accepted an append from writer after at.
func (c *cluster) acceptedSince(t testing.TB, writer string, at time.Time) (int64, bool) {
	t.Helper()
	for _, o := range c.outcomes(t) {
		if o.Op == "append" && o.Accepted && writerOf(o.Writer, writer) && o.At.After(at) {
			return o.Token, true
		}
	}
	return 0, false
}

// podInNetns runs a command inside the network namespace of the process pid (a container).
func podInNetns(pid int, args ...string) error {
	cmd := exec.Command("nsenter", append([]string{fmt.Sprintf("--net=/proc/%d/ns/net", pid), "--"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// podEvents keeps the events of one pod UID.
func podEvents(pods []podObs, uid string) []podObs {
	var out []podObs
	for _, p := range pods {
		if string(p.Pod.UID) == uid {
			out = append(out, p)
		}
	}
	return out
}

// firstAccepted is the first append of uid's pod accepted after at with a token of at least
// min, and when the ledger accepted it.
func (c *cluster) firstAccepted(t testing.TB, uid string, min int64, at time.Time) (int64, time.Time, bool) {
	t.Helper()
	for _, o := range c.outcomes(t) {
		if o.Op == "append" && o.Accepted && writerOf(o.Writer, uid) && o.At.After(at) && o.Token >= min {
			return o.Token, o.At, true
		}
	}
	return 0, time.Time{}, false
}

// writerOf reports whether a ledger writer ID is one of the pod uid's processes (the writer
// is the pod UID and the process's incarnation, pkg/fence/writer).
func writerOf(id, uid string) bool {
	return writer.Owner(id) == uid
}
