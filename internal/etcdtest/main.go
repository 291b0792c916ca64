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
		if err := goleak.Find(ignoreKilledMembers...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// ignoreKilledMembers leaves out of the leak check what an embedded etcd member hard-stopped
// by Cluster.Kill can leave behind for good: a peer's GET /version served by the stopped
// member's HTTP server, blocked on its closed backend's lock (etcd's http.Server.Close does
// not wait for its handlers). It is etcd's goroutine, not the code under test; seen after
// the leader-kill tests of pkg/lease (semaphore and mutex).
var ignoreKilledMembers = []goleak.Option{
	goleak.IgnoreAnyFunction("go.etcd.io/etcd/server/v3/etcdserver/api/etcdhttp.newPeerHandler.versionHandler.func1"),
}
