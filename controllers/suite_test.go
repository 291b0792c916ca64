package controllers_test

import (
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

var (
	env    *testenv.Env
	etcd   *testenv.Etcd
	scheme *runtime.Scheme
	k8s    client.WithWatch // uncached: tests assert through a live client
)

// TestMain starts one control plane (with the shipped admission policy, its finalizer
// binding scoped to the fixtures' namespaces) and the controller's etcd for every test here.
func TestMain(m *testing.M) {
	os.Exit(controllertest.RunTests(m, testenv.SuiteOptions{Policy: true}, func(s *testenv.Suite) (err error) {
		env, etcd, k8s = s.Env, s.Etcd, s.Client
		if scheme, err = testenv.Scheme(); err != nil {
			return err
		}
		return controllertest.ScopeFinalizerBinding(s.Client)
	}))
}

// fixtureNamespace is a new namespace for a fixture, under the suite's finalizer binding.
func fixtureNamespace(t testing.TB, prefix string) *corev1.Namespace {
	t.Helper()
	return controllertest.FixtureNamespace(t, k8s, prefix)
}

// fixture is one test's namespace, etcd prefix and running controller.
type fixture struct {
	t      testing.TB
	ns     string
	prefix string
	cli    *clientv3.Client
	engine *lease.Engine
	stop   func()
}

// newFixture creates a namespace and starts a controller (manager + election) for it on a
// fresh etcd prefix.
func newFixture(t testing.TB) *fixture {
	t.Helper()
	ns := fixtureNamespace(t, "ctrl-")
	b := controllertest.NewBackend(t, etcd.Endpoint)
	f := &fixture{t: t, ns: ns.Name, prefix: b.Prefix, cli: b.Client, engine: b.Engine}
	f.stop = f.startController("replica-a", 3*time.Second)
	t.Cleanup(func() { f.stop() })
	return f
}

// startController runs a manager with the lockwarden controller (its own election session)
// limited to the fixture's namespace; the returned func stops it and waits.
func (f *fixture) startController(identity string, electionTTL time.Duration) func() {
	f.t.Helper()
	return controllertest.Start(f.t, env.Config, controllertest.Config{
		Namespace: f.ns, Engine: f.engine, Identity: identity, ElectionTTL: electionTTL})
}
