package main

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
)

// The child the agent runs in these tests is this test binary again, in child mode: it
// appends "start <pid> <monotonic ns> <token> <slot>" to the file named by childFileEnv, then
// "term <pid> <ns>" when SIGTERM arrives; it exits after SIGTERM unless childIgnoreTermEnv is
// set, and exits at once with childExitEnv's code when that is set. With childGrandchildEnv it
// first starts a grandchild (this binary again, "grandchild" lines) in its process group.
const (
	childFileEnv       = "LWAGENT_TEST_CHILD_FILE"
	childIgnoreTermEnv = "LWAGENT_TEST_CHILD_IGNORE_TERM"
	childExitEnv       = "LWAGENT_TEST_CHILD_EXIT"
	childGrandchildEnv = "LWAGENT_TEST_CHILD_GRANDCHILD"
	childRoleEnv       = "LWAGENT_TEST_CHILD_ROLE"
)

var (
	env   *testenv.Env
	suite *testenv.Suite
	k8s   client.WithWatch // uncached admin client: tests assert through it
	cs    kubernetes.Interface
)

// TestMain starts the control plane (kube-apiserver and etcd from ./bin, `make envtest-bins`)
// and the controller's etcd for every test here, unless this process is a test child.
func TestMain(m *testing.M) {
	if path := os.Getenv(childFileEnv); path != "" {
		os.Exit(runChild(path))
	}
	os.Exit(controllertest.RunTests(m, testenv.SuiteOptions{}, func(s *testenv.Suite) (err error) {
		suite, env, k8s = s, s.Env, s.Client
		cs, err = kubernetes.NewForConfig(s.Config)
		return err
	}))
}

// monoNow reads CLOCK_MONOTONIC, the clock every process here shares.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}

// runChild is child mode (see childFileEnv).
func runChild(path string) int {
	role := os.Getenv(childRoleEnv)
	if role == "" {
		role = "start"
	}
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return 3
	}
	defer f.Close()
	record := func(kind string, extra string) {
		fmt.Fprintf(f, "%s %d %d %s\n", kind, os.Getpid(), monoNow(), extra)
	}
	if role == "start" && os.Getenv(childGrandchildEnv) != "" {
		gc, err := os.StartProcess(os.Args[0], []string{os.Args[0]}, &os.ProcAttr{
			Env: append(os.Environ(), childRoleEnv+"=grandchild", childGrandchildEnv+"=", childExitEnv+"="),
		})
		if err == nil {
			// Wait until the grandchild has recorded itself, so that a test sees every
			// process of the group even when the agent stops it right away.
			mark := fmt.Sprintf("grandchild %d ", gc.Pid)
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if b, _ := os.ReadFile(path); strings.Contains(string(b), mark) {
					break
				}
			}
			_ = gc.Release()
		}
	}
	record(role, os.Getenv("LOCKWARDEN_TOKEN")+" "+os.Getenv("LOCKWARDEN_SLOT"))
	if c := os.Getenv(childExitEnv); c != "" {
		n, _ := strconv.Atoi(c)
		return n
	}
	for {
		select {
		case <-terms:
			record("term", "")
			if os.Getenv(childIgnoreTermEnv) == "" {
				return 0
			}
		case <-time.After(time.Hour):
		}
	}
}
