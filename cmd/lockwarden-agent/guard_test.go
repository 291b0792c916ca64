package main

import "os"

// The agent's guard is this binary again (guard_linux.go). In the test binary main does not
// run, so the guard starts here, before the tests (and TestMain) would.
func init() {
	if os.Getenv(guardEnv) != "" {
		os.Exit(runGuard(os.Args[1:], os.Environ()))
	}
}
