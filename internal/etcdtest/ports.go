package etcdtest

import (
	"fmt"
	"net"
	"testing"
)

// FreePorts returns n distinct loopback TCP ports that were free a moment
// ago. (etcd's proxy reports ":0" when asked to pick one itself, and a member
// that restarts must keep its ports, so ports are chosen up front.)
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := freePorts(n)
	if err != nil {
		t.Fatalf("free ports: %v", err)
	}
	return ports
}

func freePorts(n int) ([]int, error) {
	lns := make([]net.Listener, 0, n)
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("listen: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
