package writer_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/lockwarden/lockwarden/pkg/fence/writer"
)

func TestIDAndParse(t *testing.T) {
	inc := writer.NewIncarnation()
	id := writer.ID("1f0c7a2e-uid", inc)
	if want := "1f0c7a2e-uid/" + inc; id != want {
		t.Fatalf("ID = %q, want %q", id, want)
	}
	owner, got, err := writer.Parse(id)
	if err != nil || owner != "1f0c7a2e-uid" || got != inc {
		t.Fatalf("Parse(%q) = %q, %q, %v, want the owner and incarnation back", id, owner, got, err)
	}
	if o := writer.Owner(id); o != "1f0c7a2e-uid" {
		t.Fatalf("Owner(%q) = %q, want the pod UID", id, o)
	}
	for _, bad := range []string{"", "pod", "/" + inc, "pod/", "pod/0123", "pod/0123456789ABCDEF", "pod/0123456789abcdeg"} {
		if _, _, err := writer.Parse(bad); !errors.Is(err, writer.ErrInvalid) {
			t.Errorf("Parse(%q) = %v, want ErrInvalid", bad, err)
		}
		if o := writer.Owner(bad); o != bad {
			t.Errorf("Owner(%q) = %q, want it unchanged", bad, o)
		}
	}
}

func TestIncarnations(t *testing.T) {
	if a, b := writer.Incarnation(), writer.Incarnation(); a != b {
		t.Fatalf("Incarnation() = %q then %q, want one ID per process", a, b)
	}
	if writer.Of("pod") != writer.ID("pod", writer.Incarnation()) {
		t.Fatalf("Of(pod) = %q, want pod/Incarnation()", writer.Of("pod"))
	}
	seen := map[string]bool{writer.Incarnation(): true}
	for range 1000 {
		inc := writer.NewIncarnation()
		if seen[inc] {
			t.Fatalf("NewIncarnation drew %q twice", inc)
		}
		seen[inc] = true
	}
}

// Another process of the same program has another incarnation.
func TestIncarnationPerProcess(t *testing.T) {
	if os.Getenv("WRITER_TEST_PRINT") != "" {
		os.Stdout.WriteString(writer.Incarnation())
		os.Exit(0)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^TestIncarnationPerProcess$")
	cmd.Env = append(os.Environ(), "WRITER_TEST_PRINT=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	other := strings.TrimSpace(string(out))
	if _, _, err := writer.Parse(writer.ID("pod", other)); err != nil {
		t.Fatalf("child's incarnation %q: %v", other, err)
	}
	if other == writer.Incarnation() {
		t.Fatalf("two processes drew the same incarnation %q", other)
	}
}
