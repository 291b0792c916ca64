package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/lockwarden/lockwarden/internal/testenv"
)

// TestNoCRD: against an API server without the DistributedLock CRD, every verb that reads a
// lock says the API is not installed (exit 1). It starts a second control plane of its own.
func TestNoCRD(t *testing.T) {
	assets, err := testenv.AssetsDir(env.Root)
	if err != nil {
		t.Fatal(err)
	}
	bare := &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlaneStartTimeout: time.Minute, ControlPlaneStopTimeout: time.Minute}
	if _, err := bare.Start(); err != nil {
		t.Fatalf("start a control plane without CRDs: %v", err)
	}
	t.Cleanup(func() {
		if err := bare.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	user, err := bare.ControlPlane.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"get"}, {"get", "-A"}, {"history", "x"}, {"why", "x"}, {"release", "x", "--reason", "r"},
		{"unfinalize", "--all", "-A", "--manager-gone"}} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append(args, "--kubeconfig", kc), &out, &errOut)
		if code != exitError || !strings.Contains(errOut.String(), "is not installed in this cluster") {
			t.Errorf("kubectl dlock %s = %d %q, want %d saying the API is not installed", strings.Join(args, " "), code, errOut.String(), exitError)
		}
	}
}
