package global_test

import (
	"context"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/internal/testenv/controllertest"
)

var (
	env  *testenv.Env
	etcd *testenv.Etcd
	k8s  client.WithWatch // uncached: tests assert through a live client
)

// TestMain starts the east cluster's control plane (with the shipped admission policy, its
// finalizer binding scoped to the fixtures' namespaces, as controllers' suite does) and the
// etcd that both clusters' managers share; each test starts the west control plane itself.
// A passing run fails if goroutines are left (controllertest.RunTests).
func TestMain(m *testing.M) {
	os.Exit(controllertest.RunTests(m, testenv.SuiteOptions{Policy: true}, func(s *testenv.Suite) error {
		env, etcd, k8s = s.Env, s.Etcd, s.Client
		return controllertest.ScopeFinalizerBinding(s.Client)
	}))
}

// fixtureNamespace is a new namespace in the east cluster, under the suite's finalizer binding.
func fixtureNamespace(t testing.TB, prefix string) *corev1.Namespace {
	t.Helper()
	return controllertest.FixtureNamespace(t, k8s, prefix)
}

func bg() context.Context { return context.Background() }

var (
	eventually   = controllertest.Eventually
	consistently = controllertest.Consistently
	globalLock   = controllertest.GlobalLock
)
