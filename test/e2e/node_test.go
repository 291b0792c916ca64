//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// nodeIP is the node's address inside its network namespace (hack/node/lib.sh).
const nodeIP = "10.250.0.1"

// hostDirs are the folders hack/node bind-mounts over inside its mount namespace (lib.sh).
var hostDirs = []string{"/var/lib/kubelet", "/var/lib/cni", "/var/log/containers", "/var/log/pods"}

// node is one hack/node cluster started by a test.
type node struct {
	root, dir, cgroup string
	holder            int    // PID of the namespace holder
	netID, mntID      string // net:[inode], mnt:[inode] of its namespaces
	ns                netns
	madeDirs          []string // hostDirs that did not exist before the node started
	cfg               *rest.Config
	kube              *kubernetes.Clientset
}

// startNode starts a node with hack/node/up.sh in a fresh folder, with extra environment
// (KCM_ARGS, KUBELET_ARGS), and stops it when the test ends, failing the test if anything
// of it is left behind.
func startNode(t testing.TB, cgroup string, env ...string) *node {
	t.Helper()
	requireNodeHost(t)
	n := &node{root: repoRoot(t), dir: t.TempDir(), cgroup: cgroup}
	for _, d := range hostDirs {
		if _, err := os.Stat(d); os.IsNotExist(err) {
			n.madeDirs = append(n.madeDirs, d)
		}
	}
	start := time.Now()
	out, err := n.script(env, "up.sh")
	t.Logf("hack/node/up.sh (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	t.Cleanup(func() { n.stop(t) })
	if err != nil {
		t.Fatalf("hack/node/up.sh: %v", err)
	}
	pid, err := os.ReadFile(filepath.Join(n.dir, "run", "ns.pid"))
	if err != nil {
		t.Fatalf("read the namespace holder's pid: %v", err)
	}
	if n.holder, err = strconv.Atoi(strings.TrimSpace(string(pid))); err != nil {
		t.Fatalf("namespace holder pid %q: %v", pid, err)
	}
	ids, err := os.ReadFile(filepath.Join(n.dir, "run", "ns.ids"))
	if err != nil {
		t.Fatalf("read the node's namespace ids: %v", err)
	}
	if _, err := fmt.Sscan(string(ids), &n.netID, &n.mntID); err != nil {
		t.Fatalf("namespace ids %q: %v", ids, err)
	}
	n.ns = netns{path: fmt.Sprintf("/proc/%d/ns/net", n.holder)}
	n.cfg, err = clientcmd.BuildConfigFromFlags("", filepath.Join(n.dir, "pki", "admin.kubeconfig"))
	if err != nil {
		t.Fatalf("load the node's admin kubeconfig: %v", err)
	}
	n.cfg.Dial = n.ns.DialContext
	n.cfg.QPS, n.cfg.Burst = 50, 100
	if n.kube, err = kubernetes.NewForConfig(n.cfg); err != nil {
		t.Fatal(err)
	}
	return n
}

// environ is the environment of hack/node's scripts for this node.
func (n *node) environ(extra []string) []string {
	return append(append(os.Environ(), "NODE_DIR="+n.dir, "NODE_CGROUP="+n.cgroup), extra...)
}

// script runs hack/node/<name> with args and returns its combined output.
func (n *node) script(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(n.root, "hack", "node", name), args...)
	cmd.Env = n.environ(env)
	cmd.Dir = n.root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// kubectl runs ./bin/kubectl against the node (hack/node/kubectl) and returns its stdout.
func (n *node) kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(n.root, "hack", "node", "kubectl"), args...)
	cmd.Env = n.environ(nil)
	cmd.Dir = n.root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// stop runs hack/node/down.sh and fails the test on anything left behind.
func (n *node) stop(t testing.TB) {
	t.Helper()
	start := time.Now()
	out, err := n.script(nil, "down.sh")
	t.Logf("hack/node/down.sh (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Errorf("hack/node/down.sh: %v", err)
	}
	if t.Failed() {
		keep := filepath.Join(n.root, "bin", "e2e", strings.ReplaceAll(t.Name(), "/", "_")+"-logs")
		_ = os.RemoveAll(keep)
		if out, err := exec.Command("cp", "-r", filepath.Join(n.dir, "logs"), keep).CombinedOutput(); err != nil {
			t.Logf("keep the node's logs: %v: %s", err, out)
		} else {
			t.Logf("the node's logs are in %s", keep)
		}
	}
	if n.netID == "" {
		return // up.sh failed before the namespaces existed
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		left := n.leftovers()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the node left behind:\n%s", strings.Join(left, "\n"))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// leftovers lists every process, mount, cgroup and folder of the node that still exists.
func (n *node) leftovers() []string {
	var left []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		netID, _ := os.Readlink(p + "/ns/net")
		mntID, _ := os.Readlink(p + "/ns/mnt")
		if netID == n.netID || mntID == n.mntID {
			cmdline, _ := os.ReadFile(p + "/cmdline")
			left = append(left, fmt.Sprintf("process %s in the node's namespaces: %s", p, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '})))
		}
	}
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 5 {
				continue
			}
			mp := fields[4]
			for _, d := range append([]string{n.dir}, hostDirs...) {
				if mp == d || strings.HasPrefix(mp, d+"/") {
					left = append(left, "mount "+mp)
				}
			}
		}
		_ = f.Close()
	}
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/" + n.cgroup)
	for _, c := range cgroups {
		left = append(left, "cgroup "+c)
	}
	for _, d := range n.madeDirs {
		if _, err := os.Stat(d); err == nil {
			left = append(left, "folder "+d)
		}
	}
	return left
}

// waitLockAdmission waits until the node's API server admits a DistributedLock
// (hack/wait-lock-admission.sh, as make deploy does): right after config/policy is applied,
// a create is refused for a few seconds with ServiceUnavailable (the MutatingAdmissionPolicy
// dispatcher has no type converter for the kind yet).
func (n *node) waitLockAdmission(t testing.TB) {
	t.Helper()
	cmd := exec.Command(filepath.Join(n.root, "hack", "wait-lock-admission.sh"), filepath.Join(n.root, "hack", "node", "kubectl"))
	cmd.Env, cmd.Dir = n.environ([]string{"WAIT_TIMEOUT=60"}), n.root
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("hack/wait-lock-admission.sh: %v\n%s", err, out)
	}
	t.Logf("hack/wait-lock-admission.sh: %s", strings.TrimSpace(string(out)))
}
