package redistest

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// RunTests is the body of a test package's TestMain for packages whose tests
// and Example functions share one redis-server (Examples cannot start one
// themselves): it starts the server in a temporary directory, sets *addr,
// runs the tests, stops the server, removes the directory and fails a
// passing run that left goroutines. It returns the exit code for os.Exit.
func RunTests(m *testing.M, addr *string) int {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	srv, err := New(dir, Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*addr = srv.Addr()
	code := m.Run()
	srv.Stop()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}
