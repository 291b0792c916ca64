package etcdtest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// RunTests is the body of a test package's TestMain for packages whose tests and Example
// functions share one embedded etcd (Examples cannot start one themselves): it starts the
// server, sets *endpoints, runs the tests, stops the server and then fails a passing run
// that left goroutines. It returns the exit code for os.Exit.
func RunTests(m *testing.M, endpoints *[]string) int {
	srv, err := New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*endpoints = []string{srv.Endpoint()}
	code := m.Run()
	srv.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}
