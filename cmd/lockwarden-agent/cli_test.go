package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCommandLine runs the agent's command line as main does: --help exits 0, and bad input
// gets exit code 125 (126, 127 for a cmd that cannot run) and a message naming the problem,
// before anything reaches the network (no API server is named here).
func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := []string{"POD_UID=uid-1", "PATH=/usr/bin:/bin"}
	for _, tc := range []struct {
		name    string
		args    []string
		environ []string
		code    int
		out     string // in stdout (help) or stderr
	}{
		{"help", []string{"--help"}, nil, 0, "Exit codes:"},
		{"exec help", []string{"exec", "-h"}, nil, 0, "lockwarden-agent exec --lock NAME"},
		{"no mode", nil, nil, 125, "Usage:"},
		{"unknown mode", []string{"run"}, pod, 125, `unknown mode "run"`},
		{"unknown flag", []string{"exec", "--bogus"}, pod, 125, "flag provided but not defined: -bogus"},
		{"no lock", []string{"exec", "--namespace", "ns", "--", "true"}, pod, 125, "--lock is required"},
		{"bad lock", []string{"exec", "--lock", "Bad_Name", "--namespace", "ns", "--", "true"}, pod, 125, `--lock "Bad_Name"`},
		{"no namespace", []string{"exec", "--lock", "l", "--", "true"}, pod, 125, "set --namespace or $POD_NAMESPACE"},
		{"namespace from env", []string{"exec", "--lock", "l", "--grace", "1ms", "--", "true"}, append(pod, "POD_NAMESPACE=ns"), 125, "--grace 1ms"},
		{"no POD_UID", []string{"exec", "--lock", "l", "--namespace", "ns", "--", "true"}, []string{"PATH=/usr/bin:/bin"}, 125, "$POD_UID is not set"},
		{"grace too long", []string{"exec", "--lock", "l", "--namespace", "ns", "--grace", "1h", "--", "true"}, pod, 125, "--grace 1h0m0s"},
		{"no command", []string{"exec", "--lock", "l", "--namespace", "ns"}, pod, 125, "no command"},
		{"bad probe address", []string{"exec", "--lock", "l", "--namespace", "ns", "--probe-address", "8081", "--", "true"}, pod, 125, "--probe-address"},
		{"cmd not found", []string{"exec", "--lock", "l", "--namespace", "ns", "--", "no-such-cmd"}, pod, 127, "no-such-cmd: cmd not found"},
		{"cmd not executable", []string{"exec", "--lock", "l", "--namespace", "ns", "--", plain}, pod, 126, "cmd not executable"},
		{"sidecar without token file", []string{"sidecar", "--lock", "l", "--namespace", "ns"}, pod, 125, "--token-file is required"},
		{"sidecar token folder missing", []string{"sidecar", "--lock", "l", "--namespace", "ns", "--token-file", filepath.Join(dir, "no", "t")}, pod, 125, "does not exist"},
		{"sidecar slot folder missing", []string{"sidecar", "--lock", "l", "--namespace", "ns", "--token-file", filepath.Join(dir, "t"), "--slot-file", filepath.Join(dir, "no", "s")}, pod, 125, "--slot-file " + filepath.Join(dir, "no", "s") + ": folder"},
		{"sidecar slot file is the token file", []string{"sidecar", "--lock", "l", "--namespace", "ns", "--token-file", filepath.Join(dir, "t"), "--slot-file", filepath.Join(dir, ".", "t")}, pod, 125, "is the token file"},
		{"sidecar bad listen", []string{"sidecar", "--lock", "l", "--namespace", "ns", "--token-file", filepath.Join(dir, "t"), "--listen", "x"}, pod, 125, "--listen"},
		{"sidecar argument", []string{"sidecar", "--lock", "l", "--namespace", "ns", "--token-file", filepath.Join(dir, "t"), "extra"}, pod, 125, `unexpected argument "extra"`},
		{"unreadable kubeconfig", []string{"sidecar", "--lock", "l", "--namespace", "ns", "--token-file", filepath.Join(dir, "t"), "--kubeconfig", filepath.Join(dir, "none")}, pod, 125, "load --kubeconfig"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tc.args, tc.environ, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("run(%q) = %d, want %d; stderr: %s", tc.args, code, tc.code, stderr.String())
			}
			if all := stdout.String() + stderr.String(); !strings.Contains(all, tc.out) {
				t.Errorf("run(%q) printed %q, want it to contain %q", tc.args, all, tc.out)
			}
		})
	}
}
