package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// SuiteOptions says what RunSuite starts besides the control plane (kube-apiserver and etcd
// with the CRDs of config/crd/bases installed).
type SuiteOptions struct {
	// Etcd starts a second etcd (./bin/etcd) for the controller's engine: Suite.Etcd.
	Etcd bool
	// Kubeconfig writes an administrator's kubeconfig of the control plane: Suite.Kubeconfig.
	Kubeconfig bool
	// Policy installs config/rbac/lock_reader_role.yaml and config/policy (the shipped
	// admission policy of holder-confirmed release) before the tests run, waits until a lock
	// is admitted, and makes Suite.Client send a create again that the API server refused
	// only because its policy dispatcher was not ready (RideOutConverterDelay).
	Policy bool
	// CheckLeaks fails a passing run that leaves goroutines, except those IgnoreLeaks names.
	// The check comes after everything the suite started is stopped, so that connections to
	// the control plane are closed.
	CheckLeaks bool
	// IgnoreLeaks are goleak options for goroutines the package's own dependencies leave.
	IgnoreLeaks []goleak.Option
}

// Suite is what RunSuite started for a test package, shared by every test in it.
type Suite struct {
	// Env is the control plane.
	*Env
	// Client is an uncached administrator's client of it (every read goes to the API server):
	// tests assert through a live client.
	Client client.WithWatch
	// Etcd is the controller's own etcd (SuiteOptions.Etcd), nil otherwise.
	Etcd *Etcd
	// Kubeconfig is the path of an administrator's kubeconfig (SuiteOptions.Kubeconfig),
	// "" otherwise.
	Kubeconfig string
}

// RunSuite is the body of a test package's TestMain: it starts what opts asks for, passes the
// Suite to setup (which keeps what the package's tests use), runs the tests and stops
// everything again. It returns the exit code for os.Exit.
func RunSuite(m *testing.M, opts SuiteOptions, setup func(*Suite) error) int {
	code := runSuite(m, opts, setup)
	if code == 0 && opts.CheckLeaks {
		if err := goleak.Find(opts.IgnoreLeaks...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// RunTests is RunSuite for a package that needs only the control plane: setup gets the Env.
func RunTests(m *testing.M, checkLeaks bool, setup func(*Env) error) int {
	return RunSuite(m, SuiteOptions{CheckLeaks: checkLeaks}, func(s *Suite) error { return setup(s.Env) })
}

func runSuite(m *testing.M, opts SuiteOptions, setup func(*Suite) error) int {
	s, stop, err := startSuite(opts)
	defer stop()
	if err == nil {
		err = setup(s)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// startSuite starts what opts asks for; stop undoes whatever was started, also after an error.
func startSuite(opts SuiteOptions) (s *Suite, stop func(), err error) {
	var undo []func()
	stop = func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	s = &Suite{}
	if s.Env, err = Start(); err != nil {
		return nil, stop, err
	}
	undo = append(undo, func() {
		if err := s.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	})
	if s.Client, err = s.Env.Client(); err != nil {
		return nil, stop, err
	}
	if !opts.Etcd && !opts.Kubeconfig && !opts.Policy {
		return s, stop, nil
	}
	dir, err := os.MkdirTemp("", "lockwarden-suite-")
	if err != nil {
		return nil, stop, fmt.Errorf("suite directory: %w", err)
	}
	undo = append(undo, func() { _ = os.RemoveAll(dir) })
	if opts.Etcd {
		if s.Etcd, err = StartEtcd(s.Root, filepath.Join(dir, "etcd")); err != nil {
			return nil, stop, err
		}
		undo = append(undo, s.Etcd.Stop)
	}
	if opts.Kubeconfig {
		s.Kubeconfig = filepath.Join(dir, "kubeconfig")
		if err := s.Env.Kubeconfig(s.Kubeconfig); err != nil {
			return nil, stop, err
		}
	}
	if opts.Policy {
		if err := s.Apply(context.Background(), s.Client, PolicyFiles...); err != nil {
			return nil, stop, err
		}
		if err := WaitLockAdmission(context.Background(), s.Client, 30*time.Second); err != nil {
			return nil, stop, err
		}
		s.Client = RideOutConverterDelay(s.Client, 30*time.Second)
	}
	return s, stop, nil
}

// PolicyFiles are the shipped role and admission policy that holder-confirmed release needs
// (SuiteOptions.Policy), relative to the repository root.
var PolicyFiles = []string{"config/rbac/lock_reader_role.yaml", "config/policy"}
