package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/internal/testenv"
)

// TestDemoAndExit runs the playground to one failover and the slot demo, as `make run
// ARGS=--demo-and-exit` does, and checks the failover summary (a new holder with a larger
// token, the ledger refusing the old holder's token), the slot demo's closing lines
// (checkSlotSummary), the line saying the playground has stopped; and that the README's demo
// block shows lines of this output's shape (checkDemoShown).
func TestDemoAndExit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"--demo-and-exit"}, &out); err != nil {
		t.Fatalf("playground --demo-and-exit: %v\noutput:\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 3+slotCount {
		t.Fatalf("output has %d lines, want the failover and slot summaries:\n%s", len(lines), out.String())
	}
	failover := regexp.MustCompile(`(?m)^failover: (\S+) token (\d+) -> (\S+) token (\d+)$`).FindAllStringSubmatch(out.String(), -1)
	rejected := regexp.MustCompile(`(?m)^ledger rejected token (\d+) from (\S+)$`).FindAllStringSubmatch(out.String(), -1)
	if len(failover) != 1 || len(rejected) != 1 {
		t.Fatalf("output has %d failover lines and %d ledger rejected lines, want one `failover: <old> token <n> -> <new> token <m>` and one `ledger rejected token <n> from <old>`:\n%s", len(failover), len(rejected), out.String())
	}
	checkSlotSummary(t, lines[len(lines)-2-slotCount:len(lines)-1], out.String())
	if want := "playground stopped: every process it started has exited, and ./.playground is removed"; lines[len(lines)-1] != want {
		t.Errorf("last line = %q, want %q", lines[len(lines)-1], want)
	}
	if _, err := os.Stat(filepath.Join(root(t), ".playground")); !os.IsNotExist(err) {
		t.Errorf("after the playground stopped, .playground: %v, want it removed", err)
	}
	// The locks are created once their pods run, so no lock starts with NoCandidates.
	if want := "\nWarning Events of the locks: none\n"; !strings.Contains(out.String(), want) {
		t.Errorf("output does not say %q:\n%s", strings.TrimSpace(want), out.String())
	}
	n, _ := strconv.ParseInt(failover[0][2], 10, 64)
	m, _ := strconv.ParseInt(failover[0][4], 10, 64)
	if failover[0][1] == failover[0][3] || m <= n {
		t.Errorf("failover %s token %d -> %s token %d: want another pod with a larger token", failover[0][1], n, failover[0][3], m)
	}
	if rejected[0][1] != failover[0][2] || rejected[0][2] != failover[0][1] {
		t.Errorf("rejected token %s from %s, want token %d from %s", rejected[0][1], rejected[0][2], n, failover[0][1])
	}
	// The deletion is graceful (the pods are bound to the stand-in node): the old term ends
	// without the lock delay, by the holder's own release or the stand-in kubelet's terminal
	// update (attested), never by the delay after Releasing.
	if !regexp.MustCompile(`'s term ended: (HolderReleased|HolderTerminated)\n`).MatchString(out.String()) {
		t.Errorf("output does not say the old term ended HolderReleased or HolderTerminated:\n%s", out.String())
	}
	// The routed Service follows the holder: the old one before, the new one after.
	for _, pod := range []string{failover[0][1], failover[0][3]} {
		if want := "Service payments-primary routes to " + pod + " "; !strings.Contains(out.String(), want) {
			t.Errorf("output does not say %q:\n%s", want, out.String())
		}
	}
	for _, want := range []string{"/readyz answered 200 OK", "/metrics answered 200 OK"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output does not say the manager's %q:\n%s", want, out.String())
		}
	}
	checkDemoShown(t, out.String())
}

// TestHintText: the hint puts ./bin first on PATH (kubectl 1.37 and kubectl-dlock), never a
// bare ./bin/kubectl, and its kubectl wait names the reports pod that does not hold the lock,
// so that it waits for the handoff the release before it starts; releasing the preferred
// holder adds --prefer, so the lock does not come back by preemption.
func TestHintText(t *testing.T) {
	for _, holder := range []string{"reports-0", "reports-1"} {
		h := hintText("/src/lockwarden", ".playground/kubeconfig", hintLock{holder: holder, delay: 20, preferred: "reports-0"}, "127.0.0.1:1", "127.0.0.1:2")
		other := map[string]string{"reports-0": "reports-1", "reports-1": "reports-0"}[holder]
		// the preferred holder's release moves the preference too, or the lock comes back
		if prefer := "--prefer " + other; strings.Contains(h, prefer) != (holder == "reports-0") {
			t.Errorf("hint with %s holding reports-leader (preferred reports-0): says %q = %v, want %v:\n%s", holder, prefer, holder != "reports-0", holder == "reports-0", h)
		}
		for _, want := range []string{
			"export KUBECONFIG=$PWD/.playground/kubeconfig PATH=$PWD/bin:$PATH",
			"kubectl dlock release reports-leader --reason",
			"ends " + holder + "'s term: Releasing, then the 20 s lock delay",
			"kubectl wait dlock/reports-leader --for=jsonpath='{.status.holder}'=" + other + " ",
		} {
			if !strings.Contains(h, want) {
				t.Errorf("hint with %s holding reports-leader does not say %q:\n%s", holder, want, h)
			}
		}
		if strings.Contains(h, "./bin/kubectl") {
			t.Errorf("hint names ./bin/kubectl, want kubectl from PATH:\n%s", h)
		}
	}
}

// TestHelpExitsZero: --help prints the usage and is not an error.
func TestHelpExitsZero(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, &out); err != nil {
		t.Fatalf("playground --help = %v, want nil", err)
	}
	if !strings.Contains(out.String(), "-demo-and-exit") {
		t.Errorf("--help printed %q, want the flags", out.String())
	}
}

func root(t *testing.T) string {
	t.Helper()
	r, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}
