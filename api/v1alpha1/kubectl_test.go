package v1alpha1_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// TestKubectlSelectorErrors shows what a user sees for a bad selector: one line per mistake,
// naming the field, and no line about rules left unchecked.
func TestKubectlSelectorErrors(t *testing.T) {
	kubectl, err := env.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, candidates, want string }{
		{"missing", `{}`, "spec.candidates.selector: Required value: a lock must select its candidate pods"},
		{"bad-operator", `{"selector":{"matchExpressions":[{"key":"app","operator":"Near","values":["x"]}]}}`,
			`spec.candidates.selector.matchExpressions[0].operator: Invalid value: unsupported value "Near": must be one of In, NotIn, Exists, DoesNotExist`},
		{"bad-key", `{"selector":{"matchLabels":{"bad key!":"x"}}}`, `spec.candidates.selector.matchLabels: Invalid value: invalid label key "bad key!"`},
		{"bad-value", `{"selector":{"matchLabels":{"app":"x y"}}}`, `spec.candidates.selector.matchLabels[app]: Invalid value: "x y": invalid label value "x y"`},
		{"long-value", `{"selector":{"matchLabels":{"app":"` + strings.Repeat("v", 64) + `"}}}`, `spec.candidates.selector.matchLabels[app]: Invalid value: "` + strings.Repeat("v", 64) + `": invalid label value`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "lock.json")
			doc := `{"apiVersion":"lockwarden.io/v1alpha1","kind":"DistributedLock","metadata":{"name":"` + tt.name + `","namespace":"default"},"spec":{"candidates":` + tt.candidates + `}}`
			if err := os.WriteFile(f, []byte(doc), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "create", "--dry-run=server", "-f", f).CombinedOutput()
			if err == nil {
				t.Fatalf("kubectl create accepted %s:\n%s", doc, out)
			}
			t.Logf("kubectl create --dry-run=server -f %s.json:\n%s", tt.name, out)
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("kubectl create said:\n%s\nwant a line containing %q", out, tt.want)
			}
			if strings.Contains(string(out), "<nil>") || strings.Contains(string(out), "were not checked") {
				t.Errorf("kubectl create said:\n%s\nwant no line about unchecked rules", out)
			}
		})
	}
}

// TestKubectlExplainFlows checks what `kubectl explain` shows: each field's documentation as
// flowing text (kubectl wraps it to the terminal; a line break kept from a Go comment breaks a
// sentence in two), with ranges and defaults in the text, and no implementation notes in the
// kind's description.
func TestKubectlExplainFlows(t *testing.T) {
	kubectl, err := env.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	explain := func(path string) string {
		// the API server publishes a new CRD's OpenAPI a few seconds after it is established
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "explain", path).CombinedOutput()
			if err == nil {
				return string(out)
			}
			if time.Now().After(deadline) {
				t.Fatalf("kubectl explain %s: %v\n%s", path, err, out)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	kind := explain("distributedlock")
	if strings.Contains(kind, "transition rules") || strings.Contains(kind, "root of the schema") {
		t.Errorf("kubectl explain distributedlock shows an implementation note:\n%s", kind)
	}
	spec := explain("distributedlock.spec")
	for _, want := range []string{"From 2 to 3600; default 15.", "Default false."} {
		if !strings.Contains(strings.Join(strings.Fields(spec), " "), want) {
			t.Errorf("kubectl explain distributedlock.spec does not say %q:\n%s", want, spec)
		}
	}
	// kubectl wraps at 80 columns; a kept line break shows as a short line followed by more
	// text of the same paragraph (e.g. "still" alone on a line).
	lines := strings.Split(spec, "\n")
	for i := 0; i+1 < len(lines); i++ {
		cur, next := strings.TrimSpace(lines[i]), strings.TrimSpace(lines[i+1])
		if len(lines[i]) < 50 && cur != "" && next != "" && !strings.Contains(cur, "<") &&
			!strings.HasSuffix(cur, ".") && !strings.HasSuffix(cur, ":") && !strings.HasPrefix(next, "enum") && strings.HasPrefix(lines[i], "    ") {
			t.Errorf("kubectl explain distributedlock.spec breaks a sentence after %q (next line %q):\n%s", cur, next, spec)
		}
	}
}
