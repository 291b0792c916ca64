//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/lockwarden/lockwarden/internal/testenv"
)

// init keeps the main goroutine on the main thread, so no other goroutine ever runs there: a
// netns dial (netns_test.go) switches a thread into the node's network namespace and has it
// discarded, which the runtime cannot do with the main thread (it would stay in the node's
// namespace, and /proc/<pid>/ns/net, which is the main thread's, would name it; down.sh
// would then take this process for a leftover of the node).
func init() { runtime.LockOSThread() }

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard()) // the clients' own logging is noise here
	goleak.VerifyTestMain(m,
		// client-go's and klog's process-wide background goroutines
		goleak.IgnoreTopFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
		goleak.IgnoreTopFunction("k8s.io/client-go/util/workqueue.(*Type).updateUnfinishedWorkLoop"),
	)
}

// repoRoot is the repository root, or the test fails.
func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// requireNodeHost fails the test, with the reason and the make target to run, unless this
// is Linux, we are root, and every binary the node needs is present.
func requireNodeHost(t testing.TB) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Fatalf("the e2e suite needs Linux, this is %s", runtime.GOOS)
	}
	if os.Geteuid() != 0 {
		t.Fatal("the e2e suite needs root (namespaces, mounts, cgroups): run `make e2e` as root")
	}
	bin := filepath.Join(repoRoot(t), "bin")
	for target, names := range map[string][]string{
		"make envtest-bins": {"etcd", "kube-apiserver", "kubectl"},
		"make node-bins":    {"kubelet", "kube-scheduler", "kube-controller-manager"},
		"make image":        {"images/pause.tar", "images/lockwarden.tar", "images/fenced-worker.tar", "images/lockwarden-agent.tar", "images/lockwarden", "images/fenced-worker"},
	} {
		for _, n := range names {
			if _, err := os.Stat(filepath.Join(bin, n)); err != nil {
				t.Fatalf("%s not found: run `%s`", filepath.Join(bin, n), target)
			}
		}
	}
	for _, n := range []string{"containerd", "runc", "ctr", "iptables", "/usr/lib/cni/bridge"} {
		if _, err := exec.LookPath(n); err != nil {
			t.Fatalf("%s not found: run `make node-deps`", n)
		}
	}
}
