package v1alpha1_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
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

// TestKubectlGetColumns shows `kubectl get distributedlocks` as a user sees it: the default
// columns, and the Slots column (status.slotsHeld) with "held/N" for a lock of several slots.
func TestKubectlGetColumns(t *testing.T) {
	kubectl, err := env.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t)
	ctx := context.Background()
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	for _, l := range []struct {
		name   string
		slots  int32
		status lockv1.DistributedLockStatus
	}{
		{"one", 1, lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, Holder: "p-0", HolderUID: "u0", FencingToken: 4, MaxFencingToken: 4,
			ControllerEpoch: 1, EligibleCandidates: 2, AcquireTime: &now}},
		{"pool", 3, lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, Holder: "p-0", HolderUID: "u0", FencingToken: 5, MaxFencingToken: 5,
			ControllerEpoch: 1, EligibleCandidates: 3, AcquireTime: &now, SlotsHeld: "2/3", Slots: []lockv1.SlotStatus{
				{Index: 1, Phase: lockv1.PhaseHeld, Holder: "p-1", HolderUID: "u1", FencingToken: 9, MaxFencingToken: 9, AcquireTime: &now},
				{Index: 2, Phase: lockv1.PhasePending, MaxFencingToken: 8},
			}}},
	} {
		lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: l.name, Namespace: ns}, Spec: validSpec()}
		lock.Spec.Slots = l.slots
		if err := k8s.Create(ctx, lock); err != nil {
			t.Fatalf("create %s: %v", l.name, err)
		}
		lock.Status = l.status
		if err := k8s.Status().Update(ctx, lock); err != nil {
			t.Fatalf("write %s's status: %v", l.name, err)
		}
	}
	for _, tc := range []struct {
		args []string
		head []string
		rows map[string][]string // by NAME: the cells before AGE
	}{
		{[]string{"get", "distributedlocks"}, []string{"NAME", "HOLDER", "TOKEN", "PHASE", "SLOTS", "CANDIDATES", "AGE"},
			map[string][]string{"one": {"one", "p-0", "4", "Held", "", "2"}, "pool": {"pool", "p-0", "5", "Held", "2/3", "3"}}},
		{[]string{"get", "dlock", "-o", "wide"}, []string{"NAME", "HOLDER", "TOKEN", "PHASE", "SLOTS", "CANDIDATES", "STRATEGY", "LEASE", "REASON", "AGE"},
			map[string][]string{"one": {"one", "p-0", "4", "Held", "", "2", "OldestReady", "15", ""}, "pool": {"pool", "p-0", "5", "Held", "2/3", "3", "OldestReady", "15", ""}}},
	} {
		out, err := exec.Command(kubectl, append([]string{"--kubeconfig", kubeconfig, "-n", ns}, tc.args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(tc.args, " "), err, out)
		}
		t.Logf("kubectl %s:\n%s", strings.Join(tc.args, " "), out)
		lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		if got := strings.Fields(lines[0]); strings.Join(got, " ") != strings.Join(tc.head, " ") {
			t.Errorf("kubectl %s columns = %v, want %v", strings.Join(tc.args, " "), got, tc.head)
			continue
		}
		if len(lines) != 1+len(tc.rows) {
			t.Errorf("kubectl %s printed %d rows, want %d:\n%s", strings.Join(tc.args, " "), len(lines)-1, len(tc.rows), out)
		}
		for _, line := range lines[1:] {
			cells := tableCells(lines[0], line)
			want, ok := tc.rows[cells[0]]
			if got := cells[:len(cells)-1]; !ok || strings.Join(got, "|") != strings.Join(want, "|") {
				t.Errorf("kubectl %s row %q = %q, want %q", strings.Join(tc.args, " "), cells[0], got, want)
			}
		}
	}
}

// tableCells cuts a row of a kubectl table at the header's column starts (a cell may be empty).
func tableCells(head, line string) []string {
	var starts []int
	for i := range head {
		if head[i] != ' ' && (i == 0 || head[i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	cells := make([]string, len(starts))
	for k, s := range starts {
		end := len(line)
		if k+1 < len(starts) {
			end = min(starts[k+1], len(line))
		}
		if s < len(line) {
			cells[k] = strings.TrimSpace(line[s:end])
		}
	}
	return cells
}
