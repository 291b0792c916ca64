package testenv

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// RunTests is the body of a test package's TestMain: it starts one control plane, passes it
// to setup (which builds the package's clients), runs the tests and stops the control
// plane. With checkLeaks, a passing run then fails if goroutines are left; the check comes
// after the stop, so that connections to the control plane are closed. It returns the exit
// code for os.Exit.
func RunTests(m *testing.M, checkLeaks bool, setup func(*Env) error) int {
	code := runWithControlPlane(m, setup)
	if code == 0 && checkLeaks {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

func runWithControlPlane(m *testing.M, setup func(*Env) error) int {
	env, err := Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	if err := setup(env); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
