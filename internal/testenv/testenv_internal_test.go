package testenv

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// TestStartStopsOnCRDFailure: a CRD the API server refuses fails Start, and the control plane
// it started is stopped (before the fix its kube-apiserver and etcd outlived the test).
func TestStartStopsOnCRDFailure(t *testing.T) {
	dir := t.TempDir()
	bad := `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: other.example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
`
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	crds := func(e *Env) error {
		e.env.CRDDirectoryPaths = []string{dir}
		e.env.CRDInstallOptions = envtest.CRDInstallOptions{}
		return nil
	}
	env, err := Start(crds)
	if err == nil {
		_ = env.Stop()
		t.Fatal("Start with a CRD the API server refuses = nil error")
	}
	t.Logf("Start: %v", err)
	if kids := children(t); len(kids) > 0 {
		t.Errorf("after a failed Start these child processes still run: %v", kids)
	}
}

// children lists the live processes whose parent is this test process.
func children(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("list child processes: %v", err)
	}
	me := strconv.Itoa(os.Getpid())
	var out []string
	for _, e := range entries {
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'
		s := string(stat)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 1 && f[1] == me && f[0] != "Z" {
			out = append(out, e.Name()+" "+s[strings.IndexByte(s, '(')+1:strings.LastIndexByte(s, ')')])
		}
	}
	return out
}
