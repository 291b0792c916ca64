package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/lockwarden/lockwarden/internal/testenv"
)

// TestDeployManifestsDryRun applies config/default, config/ha and the example's manifests server-side
// (dry run) with kubectl 1.37 against a real API server, after creating their namespaces for
// real (a dry run cannot create a namespace for the objects after it).
func TestDeployManifestsDryRun(t *testing.T) {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lockwarden-system", "fenced-demo"} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if _, err := cs.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace %s: %v", name, err)
		}
	}
	kubectl, err := env.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		dir  string
		want []string
	}{
		{"config/default", []string{
			"customresourcedefinition.apiextensions.k8s.io/distributedlocks.lockwarden.io",
			"deployment.apps/lockwarden-manager",
			"persistentvolumeclaim/lockwarden-etcd-data",
			"service/lockwarden-manager-metrics",
			"clusterrole.rbac.authorization.k8s.io/lockwarden-manager",
			"clusterrole.rbac.authorization.k8s.io/lockwarden-aggregate-to-view",
			"clusterrole.rbac.authorization.k8s.io/lockwarden-aggregate-to-edit",
			"serviceaccount/lockwarden-manager",
		}},
		{"config/ha", []string{
			"deployment.apps/lockwarden-manager",
			"poddisruptionbudget.policy/lockwarden-manager",
			"service/lockwarden-manager-metrics",
		}},
		{"examples/fenced-worker/deploy", []string{
			"deployment.apps/fenced-worker",
			"role.rbac.authorization.k8s.io/fenced-worker",
			"distributedlock.lockwarden.io/ledger-writer",
			"service/ledger",
		}},
	} {
		out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "--dry-run=server", "-k", filepath.Join(env.Root, tt.dir)).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl apply --dry-run=server -k %s: %v\n%s", tt.dir, err, out)
		}
		for _, want := range tt.want {
			if !strings.Contains(string(out), want) {
				t.Errorf("kubectl apply -k %s: output lacks %q:\n%s", tt.dir, want, out)
			}
		}
	}
}
