package fence_test

import (
	"context"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// endpoints is an etcd shared by the tests and examples of this package.
var endpoints []string

func TestMain(m *testing.M) { os.Exit(etcdtest.RunTests(m, &endpoints)) }

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
