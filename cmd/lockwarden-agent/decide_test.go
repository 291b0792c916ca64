package main

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	const g = time.Second
	for _, tc := range []struct {
		name      string
		running   bool
		left      time.Duration
		want      step
		wantAfter time.Duration
	}{
		{"running, plenty left: look again at ValidUntil - grace", true, 4 * g, stepKeep, 3 * g},
		{"running, just over grace left", true, g + time.Millisecond, stepKeep, time.Millisecond},
		{"running, grace left: SIGTERM now", true, g, stepStop, 0},
		{"running, term over", true, -1, stepStop, 0},
		{"stopped, over twice grace left: start", false, 2*g + time.Millisecond, stepStart, 0},
		{"stopped, twice grace left: wait", false, 2 * g, stepWait, recheck},
		{"stopped, not leading: wait", false, -1, stepWait, recheck},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, after := decide(tc.running, tc.left, g)
			if got != tc.want || after != tc.wantAfter {
				t.Errorf("decide(%v, %v, %v) = %v, %v; want %v, %v", tc.running, tc.left, g, got, after, tc.want, tc.wantAfter)
			}
		})
	}
}

func TestRefuseTerm(t *testing.T) {
	for _, tc := range []struct {
		left, grace time.Duration
		refused     bool
	}{
		{13 * time.Second, 5 * time.Second, false}, // L=15s: 15 - 2
		{8 * time.Second, 5 * time.Second, true},   // L=10s: 10 - 2; 5s does not fit
		{8 * time.Second, 4 * time.Second, true},   // exactly twice
		{8 * time.Second, 2 * time.Second, false},
		{1500 * time.Millisecond, time.Second, true}, // L=2s
	} {
		err := refuseTerm(tc.left, tc.grace)
		if (err != nil) != tc.refused {
			t.Errorf("refuseTerm(%v, %v) = %v, want refused %v", tc.left, tc.grace, err, tc.refused)
		}
	}
}

func TestKillTime(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name string
		vu   time.Time
		want time.Time
	}{
		{"no validity known: after the grace", time.Time{}, now.Add(time.Second)},
		{"validity far: after the grace", now.Add(10 * time.Second), now.Add(time.Second)},
		{"validity near: killLead before it", now.Add(500 * time.Millisecond), now.Add(500*time.Millisecond - killLead)},
		{"validity passed: at once", now.Add(-time.Second), now.Add(-time.Second - killLead)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := killTime(now, tc.vu, time.Second); !got.Equal(tc.want) {
				t.Errorf("killTime = now%+v, want now%+v", got.Sub(now), tc.want.Sub(now))
			}
		})
	}
}

func TestExitCode(t *testing.T) {
	exited := func(code int) *syscall.WaitStatus { ws := syscall.WaitStatus(code << 8); return &ws }
	killed := func(sig syscall.Signal) *syscall.WaitStatus { ws := syscall.WaitStatus(sig); return &ws }
	for _, tc := range []struct {
		name string
		ws   *syscall.WaitStatus
		want int
	}{
		{"exit 0", exited(0), 0},
		{"exit 3", exited(3), 3},
		{"killed by SIGKILL", killed(syscall.SIGKILL), 137},
		{"killed by SIGTERM", killed(syscall.SIGTERM), 143},
		{"no status", nil, exitAgent},
	} {
		if got := exitCode(tc.ws); got != tc.want {
			t.Errorf("exitCode(%s) = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestWriteToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	for _, tc := range []struct {
		token int64
		want  string
	}{{42, "42\n"}, {0, ""}, {43, "43\n"}} {
		if err := writeToken(path, tc.token); err != nil {
			t.Fatalf("writeToken(%d) = %v", tc.token, err)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != tc.want {
			t.Errorf("after writeToken(%d): file = %q, %v; want %q", tc.token, b, err, tc.want)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".token.*")); len(left) > 0 {
		t.Errorf("temporary files left: %q", left)
	}
	if err := writeToken(filepath.Join(path, "below-a-file"), 1); err == nil {
		t.Errorf("writeToken under a regular file = nil, want an error")
	}
}

func TestHubDropsOldestForSlowSubscriber(t *testing.T) {
	h := newHub()
	ch := h.subscribe()
	for i := range subscriberBuffer + 5 {
		h.publish(event{name: "holder", data: []byte{byte('a' + i)}})
	}
	var names []string
	for range subscriberBuffer {
		names = append(names, (<-ch).name)
	}
	if names[len(names)-1] != "holder" || !contains(names, "gap") {
		t.Errorf("slow subscriber got %q, want a gap marker and the newest event last", names)
	}
	h.close()
	if _, ok := <-ch; ok {
		t.Errorf("subscriber channel open after close")
	}
	if _, ok := <-h.subscribe(); ok {
		t.Errorf("subscribe after close returned an open channel")
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func TestLookCmd(t *testing.T) {
	dir := t.TempDir()
	exe, plain := filepath.Join(dir, "exe"), filepath.Join(dir, "plain")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cmd, path string
		want      string
		wantErr   error
	}{
		{"exe", dir, exe, nil},
		{exe, "", exe, nil},
		{"plain", dir, "", errCmdNotExecutable},
		{plain, "", "", errCmdNotExecutable},
		{"missing", dir, "", errCmdNotFound},
		{filepath.Join(dir, "missing"), "", "", errCmdNotFound},
		{"exe", "/nonexistent" + string(filepath.ListSeparator) + dir, exe, nil},
	} {
		got, err := lookCmd(tc.cmd, tc.path)
		if got != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
			t.Errorf("lookCmd(%q, %q) = %q, %v; want %q, %v", tc.cmd, tc.path, got, err, tc.want, tc.wantErr)
		}
	}
}
