package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBadFlagsNameTheFlag(t *testing.T) {
	dir := t.TempDir()
	cert := filepath.Join(dir, "tls.crt")
	if err := os.WriteFile(cert, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	ok := "--etcd-endpoints=https://etcd-0:2379"
	tests := []struct {
		args []string
		flag string
	}{
		{[]string{}, "--etcd-endpoints"},
		{[]string{ok, "--embedded-etcd-dir=" + dir}, "--embedded-etcd-dir"},
		{[]string{"--etcd-endpoints=ftp://x:1"}, "--etcd-endpoints"},
		{[]string{"--etcd-endpoints=host-without-port"}, "--etcd-endpoints"},
		{[]string{"--etcd-endpoints= , "}, "--etcd-endpoints"},
		{[]string{ok, "--election-ttl=1s"}, "--election-ttl"},
		{[]string{ok, "--election-ttl=2500ms"}, "--election-ttl"},
		{[]string{ok, "--election-ttl=abc"}, "--election-ttl"},
		{[]string{ok, "--etcd-lease-ttl=10s"}, "--etcd-lease-ttl"},
		{[]string{ok, "--etcd-prefix=nolead"}, "--etcd-prefix"},
		{[]string{ok, "--etcd-prefix=/a/"}, "--etcd-prefix"},
		{[]string{ok, "--etcd-cert-file=" + cert}, "--etcd-key-file"},
		{[]string{ok, "--etcd-ca-file=/nonexistent/ca.crt"}, "--etcd-ca-file"},
		{[]string{ok, "--metrics-bind-address=8080"}, "--metrics-bind-address"},
		{[]string{ok, "--pprof-bind-address=localhost"}, "--pprof-bind-address"},
		{[]string{ok, "--health-probe-bind-address=x"}, "--health-probe-bind-address"},
		{[]string{ok, "--max-concurrent-reconciles=0"}, "--max-concurrent-reconciles"},
		{[]string{"--embedded-etcd-dir=" + dir, "--embedded-etcd-listen=10.0.0.1:2379"}, "--embedded-etcd-listen"},
		{[]string{"--embedded-etcd-dir=" + dir, "--etcd-ca-file=" + cert}, "--embedded-etcd-dir"},
		{[]string{ok, "--no-such-flag"}, "--no-such-flag"},
		{[]string{ok, "--watch-namespaces=Shop"}, "--watch-namespaces"},
		{[]string{ok, "--watch-namespaces=,"}, "--watch-namespaces"},
		{[]string{ok, "--cluster-name=East"}, "--cluster-name"},
		{[]string{ok, "--cluster-name=east_1"}, "--cluster-name"},
		{[]string{ok, "--cluster-name=" + strings.Repeat("a", 64)}, "--cluster-name"},
		{[]string{ok, "--cluster-name=-east"}, "--cluster-name"},
		{[]string{ok, "--global-etcd-prefix=global"}, "--global-etcd-prefix"},
		{[]string{ok, "--global-etcd-prefix=/g/"}, "--global-etcd-prefix"},
		{[]string{ok, "--global-etcd-prefix=/lockwarden"}, "--global-etcd-prefix"},
		{[]string{ok, "--global-etcd-prefix=/lockwarden/global"}, "--global-etcd-prefix"},
		{[]string{ok, "--etcd-prefix=/g/east", "--global-etcd-prefix=/g"}, "--global-etcd-prefix"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			_, err := parseFlags(tt.args, io.Discard)
			if err == nil {
				t.Fatalf("parseFlags(%q) = nil, want an error naming %s", tt.args, tt.flag)
			}
			if !strings.HasPrefix(err.Error(), tt.flag+":") {
				t.Errorf("parseFlags(%q) = %q, want it to start with %s:", tt.args, err, tt.flag)
			}
		})
	}
}

func TestGoodFlagsParse(t *testing.T) {
	o, err := parseFlags([]string{"--etcd-endpoints=https://a:2379, https://b:2379", "--identity=x"}, io.Discard)
	if err != nil {
		t.Fatalf("parseFlags: %v", err)
	}
	if len(o.etcdEndpoints) != 2 || o.electionTTL != 15*time.Second || o.grantTTL != 60*time.Second || o.etcdPrefix != "/lockwarden" || o.namespaces != nil {
		t.Errorf("options = %+v; want 2 endpoints and the documented defaults", o)
	}
	o, err = parseFlags([]string{"--etcd-endpoints=https://a:2379", "--watch-namespaces=shop, payments"}, io.Discard)
	if err != nil {
		t.Fatalf("parseFlags: %v", err)
	}
	if got := strings.Join(o.namespaces, ","); got != "shop,payments" {
		t.Errorf("--watch-namespaces parsed as %q, want shop,payments", got)
	}
}

func TestGlobalFlagsParse(t *testing.T) {
	o, err := parseFlags([]string{"--etcd-endpoints=https://a:2379"}, io.Discard)
	if err != nil {
		t.Fatalf("parseFlags: %v", err)
	}
	if o.clusterName != "" || o.globalEtcdPrefix != "/lockwarden-global" {
		t.Errorf("cluster name %q, global prefix %q; want unset and /lockwarden-global", o.clusterName, o.globalEtcdPrefix)
	}
	o, err = parseFlags([]string{"--etcd-endpoints=https://a:2379", "--cluster-name=east-1", "--global-etcd-prefix=/shared/global", "--etcd-prefix=/east"}, io.Discard)
	if err != nil {
		t.Fatalf("parseFlags: %v", err)
	}
	if o.clusterName != "east-1" || o.globalEtcdPrefix != "/shared/global" {
		t.Errorf("cluster name %q, global prefix %q; want east-1 and /shared/global", o.clusterName, o.globalEtcdPrefix)
	}
}

// TestFlagHelpDocumentsGlobal: --help lists the Global lock flags with their default.
func TestFlagHelpDocumentsGlobal(t *testing.T) {
	var help strings.Builder
	if _, err := parseFlags([]string{"--help"}, &help); err == nil {
		t.Fatal("parseFlags(--help) = nil error, want flag.ErrHelp")
	}
	for _, want := range []string{"-cluster-name", "ClusterNameUnset", "-global-etcd-prefix", `(default "/lockwarden-global")`} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("--help does not mention %q:\n%s", want, help.String())
		}
	}
}

// TestBinaryRejectsBadFlagFast runs the built binary: a bad value exits non-zero within a
// second, in under 5 lines, the last naming the flag, before touching anything else.
func TestBinaryRejectsBadFlagFast(t *testing.T) {
	bin := filepath.Join("..", "..", "bin", "lockwarden")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%s not found: run `make build`", bin)
	}
	start := time.Now()
	cmd := exec.Command(bin, "--etcd-endpoints=https://etcd:2379", "--election-ttl=1s")
	cmd.Env = append(os.Environ(), "KUBECONFIG=/nonexistent")
	out, err := cmd.CombinedOutput()
	elapsed := time.Since(start)
	if err == nil {
		t.Fatalf("exit 0, want non-zero; output %q", out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) >= 5 || !strings.Contains(lines[len(lines)-1], "--election-ttl") {
		t.Errorf("output %q: want under 5 lines, the last naming --election-ttl", out)
	}
	if elapsed > time.Second {
		t.Errorf("took %v, want under a second", elapsed)
	}
}
