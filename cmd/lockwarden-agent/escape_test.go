package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// stubbornEscapeScript starts a writer that leaves the child's process group (setsid) and
// ignores SIGTERM, which writes its PID to $1 and then appends to $2 every 10 ms; the child
// itself exits on SIGTERM.
const stubbornEscapeScript = `setsid sh -c 'trap "" TERM; echo $$ >> "$1"; while :; do echo e >> "$2"; sleep 0.01; done' sh "$1" "$2" &
trap 'exit 0' TERM
while :; do sleep 0.05; done`

// TestExecStopKillsEscapedProcessBeforeRelease: a process the child started in a session of
// its own, which ignores SIGTERM, still counts as the term's work: the agent's stop has the
// guard send it SIGTERM and, after the grace, SIGKILL, and the release goes out only once it
// is dead (the guard exits only when the group is empty and it has no child left).
func TestExecStopKillsEscapedProcessBeforeRelease(t *testing.T) {
	f := newFixture(t)
	p := f.pod("worker-0")
	dir := t.TempDir()
	pids, out := filepath.Join(dir, "pids"), filepath.Join(dir, "out")
	a := f.startAgent(p, []string{"exec", "--grace", "1s", "--probe-address", "0", "--", "sh", "-c", stubbornEscapeScript, "sh", pids, out})
	var escaped []int
	t.Cleanup(func() {
		for _, pid := range escaped { // left running by a failure: stop it here
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	eventually(t, 30*time.Second, func() bool {
		escaped = readPIDs(pids)
		return len(escaped) == 1 && size(out) > 0
	}, func() string { return fmt.Sprintf("the escaped writer never wrote; agent log:\n%s", a.out) })

	stopped := time.Now()
	a.cancel() // SIGTERM: the pod is deleted
	var diedAfter time.Duration
	eventually(t, 15*time.Second, func() bool {
		if dead(escaped[0]) {
			diedAfter = time.Since(stopped)
			return true
		}
		return false
	}, func() string {
		return fmt.Sprintf("the escaped writer %d still runs; agent log:\n%s", escaped[0], a.out)
	})
	if code := a.wait(t, 15*time.Second); code != exitOK {
		t.Errorf("agent exited %d, want %d; log:\n%s", code, exitOK, a.out)
	}
	n := size(out)
	time.Sleep(100 * time.Millisecond)
	released := f.get().Annotations[lockv1.AnnotationHolderRelease]
	t.Logf("escaped writer %d (ignoring SIGTERM) dead %v after the stop; holder-release %q", escaped[0], diedAfter.Round(time.Millisecond), released)
	switch {
	case size(out) != n:
		t.Errorf("the escaped writer wrote after the agent returned")
	case diedAfter < 500*time.Millisecond:
		t.Errorf("the escaped writer died %v after the stop: want SIGTERM first and SIGKILL only after the grace (1s)", diedAfter)
	case released == "":
		t.Errorf("no release once everything was gone; log:\n%s", a.out)
	case !strings.Contains(a.out.String(), `"msg"="released"`):
		t.Errorf("the log does not show the release answered; log:\n%s", a.out)
	}
}

// TestExecChildCannotForgeGuardReport: the guard's report descriptor (3) is closed on exec, so
// the child cannot write an exit line there and make the agent believe it exited (which would
// end the term, abandoned, and the agent with the forged code).
func TestExecChildCannotForgeGuardReport(t *testing.T) {
	f := newFixture(t)
	p := f.pod("worker-0")
	forged := filepath.Join(t.TempDir(), "forged")
	script := `echo "exit 768" >&3 && echo yes > "$1"; echo started >> "$1.started"; while :; do sleep 0.05; done`
	a := f.startAgent(p, []string{"exec", "--grace", "1s", "--probe-address", "0", "--", "sh", "-c", script, "sh", forged})
	eventually(t, 30*time.Second, func() bool { return size(forged+".started") > 0 },
		func() string { return fmt.Sprintf("the child never ran; log:\n%s", a.out) })
	time.Sleep(500 * time.Millisecond) // the agent would have taken the forged line by now
	if _, err := os.Stat(forged); err == nil {
		t.Errorf("the child wrote to file descriptor 3: the guard's report is open in it")
	}
	if strings.Contains(a.out.String(), "child exited by itself") {
		t.Fatalf("the agent took a line the child wrote for the guard's report; log:\n%s", a.out)
	}
	select {
	case code := <-a.done:
		close(a.done)
		t.Fatalf("the agent exited %d while its child runs; log:\n%s", code, a.out)
	default:
	}
}
