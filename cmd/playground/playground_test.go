package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDemoAndExit runs the playground to one failover, as `make run ARGS=--demo-and-exit`
// does, and checks its closing lines: a new holder with a larger token, and the ledger
// refusing the old holder's token.
func TestDemoAndExit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, []string{"--demo-and-exit"}, &out); err != nil {
		t.Fatalf("playground --demo-and-exit: %v\noutput:\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) < 2 {
		t.Fatalf("output has %d lines, want the failover summary:\n%s", len(lines), out.String())
	}
	failover := regexp.MustCompile(`^failover: (\S+) token (\d+) -> (\S+) token (\d+)$`).FindStringSubmatch(lines[len(lines)-2])
	rejected := regexp.MustCompile(`^ledger rejected token (\d+) from (\S+)$`).FindStringSubmatch(lines[len(lines)-1])
	if failover == nil || rejected == nil {
		t.Fatalf("last lines = %q, want `failover: <old> token <n> -> <new> token <m>` then `ledger rejected token <n> from <old>`", lines[len(lines)-2:])
	}
	n, _ := strconv.ParseInt(failover[2], 10, 64)
	m, _ := strconv.ParseInt(failover[4], 10, 64)
	if failover[1] == failover[3] || m <= n {
		t.Errorf("failover %s token %d -> %s token %d: want another pod with a larger token", failover[1], n, failover[3], m)
	}
	if rejected[1] != failover[2] || rejected[2] != failover[1] {
		t.Errorf("rejected token %s from %s, want token %d from %s", rejected[1], rejected[2], n, failover[1])
	}
	// The deletion is graceful (the pods are bound to the stand-in node): the old term ends
	// without the lock delay, by the holder's own release or the stand-in kubelet's terminal
	// update (attested), never by the delay after Releasing.
	if !regexp.MustCompile(`'s term ended: (HolderReleased|HolderTerminated)\n`).MatchString(out.String()) {
		t.Errorf("output does not say the old term ended HolderReleased or HolderTerminated:\n%s", out.String())
	}
	// The routed Service follows the holder: the old one before, the new one after.
	for _, pod := range []string{failover[1], failover[3]} {
		if want := "Service payments-primary routes to " + pod + " "; !strings.Contains(out.String(), want) {
			t.Errorf("output does not say %q:\n%s", want, out.String())
		}
	}
	for _, want := range []string{"/readyz answered 200 OK", "/metrics answered 200 OK"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output does not say the manager's %q:\n%s", want, out.String())
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
