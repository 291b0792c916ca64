package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestVersionFlag(t *testing.T) {
	// --version needs no etcd flag and wins over a bad one: it must work on a bare binary.
	for _, args := range [][]string{{"--version"}, {"--version", "--election-ttl=1s"}} {
		if _, err := parseFlags(args, io.Discard); !errors.Is(err, errVersion) {
			t.Errorf("parseFlags(%q) = %v, want errVersion", args, err)
		}
	}
	defer func(v string) { version = v }(version)
	version = "v0.3.1-4-gabcdef0"
	var out bytes.Buffer
	printVersion(&out)
	if !strings.HasPrefix(out.String(), "lockwarden v0.3.1-4-gabcdef0 (go") || strings.Count(out.String(), "\n") != 1 {
		t.Errorf("printVersion wrote %q, want one line starting with \"lockwarden v0.3.1-4-gabcdef0 (go\"", out.String())
	}
}

// TestBinaryVersion runs ./bin/lockwarden as `make build` made it: --version exits 0 and
// prints the version `make build` set with -ldflags -X, not the "dev" of a plain go build.
func TestBinaryVersion(t *testing.T) {
	bin := filepath.Join("..", "..", "bin", "lockwarden")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s not found: run `make build`", bin)
	}
	cmd := exec.Command(bin, "--version")
	cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lockwarden --version: %v, want exit 0; output %q", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) < 2 || f[0] != "lockwarden" {
		t.Fatalf("lockwarden --version printed %q, want \"lockwarden <version> ...\"", out)
	}
	if f[1] == "dev" {
		t.Errorf("lockwarden --version printed %q: version \"dev\" means %s was not built by `make build` (which sets -X main.version)", out, bin)
	}
}
