package fence_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// endpoints is an etcd shared by the tests and examples of this package.
var endpoints []string

func TestMain(m *testing.M) {
	srv, err := etcdtest.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	endpoints = []string{srv.Endpoint()}
	code := m.Run()
	srv.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// setup returns a client, an engine under the test's own prefix and a
// session on it, all closed at cleanup.
func setup(t *testing.T) (*clientv3.Client, *lease.Engine, *lease.Session) {
	t.Helper()
	cli := etcdtest.NewClient(t, endpoints)
	eng := lease.NewEngine(cli, lease.WithPrefix("/t/"+t.Name()))
	s, err := eng.NewSession(ctx(t), 2*time.Second)
	if err != nil {
		t.Fatalf("NewSession = %v, want nil", err)
	}
	t.Cleanup(func() { _ = s.Close(ctx(t)) })
	return cli, eng, s
}
