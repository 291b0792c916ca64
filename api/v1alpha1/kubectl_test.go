package v1alpha1_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectlDryRunSamples applies config/samples with the real kubectl 1.37 server-side.
func TestKubectlDryRunSamples(t *testing.T) {
	kubectl, err := env.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "apply", "--dry-run=server",
		"-f", filepath.Join(env.Root, "config", "samples")).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server -f config/samples: %v\n%s", err, out)
	}
	for _, want := range []string{
		"distributedlock.lockwarden.io/payments-leader created (server dry run)",
		"distributedlock.lockwarden.io/reports-leader created (server dry run)",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl output = %q, want a line %q", out, want)
		}
	}
}
