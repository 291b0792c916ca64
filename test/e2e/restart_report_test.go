//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// writeEvidence writes the recording (bin/e2e/restart-evidence.txt: the table, then each
// case in full) and the table alone (restart-evidence.md), and logs the table.
func writeEvidence(t *testing.T, dir string, cases []*evCase) {
	t.Helper()
	table := evidenceTable(cases)
	var b strings.Builder
	b.WriteString(table + "\n")
	for _, c := range cases {
		b.WriteString(c.details() + "\n")
	}
	t.Logf("restart evidence:\n%s", table)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("write the recording: %v", err)
		return
	}
	for name, body := range map[string]string{"restart-evidence.txt": b.String(), "restart-evidence.md": table} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Errorf("write %s: %v", name, err)
		}
	}
}

// evidenceTable is one markdown row per case; times from the kill (for the liveness kill,
// from the moment the probe began to fail), as this process received or sampled them.
func evidenceTable(cases []*evCase) string {
	var b strings.Builder
	b.WriteString("| pod shape | kill | old container's exit | old processes last seen alive; seen dead by: main (reaped) / daemon / stopped / exec'd | old cgroup seen empty / removed | containerd published the init's exit | API: old container terminated | API: new containerID | at the new containerID | beside it |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, c := range cases {
		b.WriteString(c.row() + "\n")
	}
	return b.String()
}

func (c *evCase) row() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recordingFailed != "" {
		return fmt.Sprintf("| %s | %s | not recorded: %s | | | | | | | |", c.shape, c.kind, c.recordingFailed)
	}
	exit, term, newID := "-", "-", "-"
	if c.term != nil {
		exit = fmt.Sprintf("%d %s", c.term.ExitCode, c.term.Reason)
		term = fmt.Sprintf("%s (%s)", ms(c.termAt.Sub(c.t0)), c.termSrc)
	}
	if !c.newAt.IsZero() {
		newID = fmt.Sprintf("%s (restartCount %d)", ms(c.newAt.Sub(c.t0)), c.newRest)
	}
	var dead []string
	c.poll.mu.Lock()
	for _, r := range oldRoles {
		d, ok := c.poll.dead[r]
		switch {
		case !ok:
			dead = append(dead, "alive")
		case r == "main":
			dead = append(dead, fmt.Sprintf("%s (%s)", sampledMs(d), sampledOrNever(reapedOf(c.poll.reaped, r))))
		default:
			dead = append(dead, sampledMs(d))
		}
	}
	cg := fmt.Sprintf("%s / %s", sampledOrNever(c.poll.empty), sampledOrNever(c.poll.removed))
	c.poll.mu.Unlock()
	procs := fmt.Sprintf("%s; %s", sampledOrNever(c.poll.lastAlive(oldRoles)), strings.Join(dead, " / "))
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", c.shape, c.kind, exit, procs, cg, c.publishOrder(), term, newID,
		c.atNewSummary(), c.besideSummary())
}

// publishOrder is when containerd published the old init's exit, against the old processes'
// deaths: after all four were seen dead, BEFORE some were last seen alive (proof that the
// runtime reported the exit while they lived), or in between (the sampler cannot tell).
func (c *evCase) publishOrder() string {
	e, ok := c.rt.initExit(c.oldID)
	if !ok {
		return "-"
	}
	at := e.Published.Sub(c.t0)
	if alive, unkilled := c.poll.aliveAfter(at, oldRoles); len(alive) > 0 {
		signalled := "all killed by then: SIGKILL pending or exiting"
		if len(unkilled) > 0 {
			signalled = strings.Join(unkilled, ", ") + " not yet signalled"
		}
		return fmt.Sprintf("%s, BEFORE %s died (%s)", sampledMs(at), strings.Join(alive, ", "), signalled)
	}
	if by, ok := c.poll.deadBy(oldRoles); ok && by <= at {
		return fmt.Sprintf("%s, after all 4 died", sampledMs(at))
	}
	return fmt.Sprintf("%s, between (not resolved by the sampler)", sampledMs(at))
}

// reapedOf is when role was first seen reaped, -1 if never.
func reapedOf(reaped map[string]time.Duration, role string) time.Duration {
	if d, ok := reaped[role]; ok {
		return d
	}
	return -1
}

// atNewSummary says what the sample at the new containerID found.
func (c *evCase) atNewSummary() string {
	if c.atNew == nil {
		return "-"
	}
	var alive []string
	for _, r := range oldRoles {
		if !c.atNew.dead(r) {
			alive = append(alive, r+" "+c.atNew.States[r])
		}
	}
	cg := "cgroup empty"
	if !c.atNew.empty() {
		var held []string
		for h, pids := range c.atNew.Procs {
			if len(pids) > 0 {
				held = append(held, fmt.Sprintf("%s %v", hierarchyName(h), pids))
			}
		}
		cg = "cgroup NOT empty (" + strings.Join(held, ", ") + ")"
	}
	if len(alive) == 0 {
		return cg + ", none of the 4 alive"
	}
	return cg + ", ALIVE: " + strings.Join(alive, ", ")
}

// besideSummary is the state of the other container's process at the new containerID.
func (c *evCase) besideSummary() string {
	if len(c.others) == 0 || c.atNew == nil {
		return "-"
	}
	var out []string
	for _, p := range c.others {
		out = append(out, p.Role+" "+c.atNew.States[p.Role])
	}
	return strings.Join(out, ", ")
}

// details is the case in full: the snapshot, the samples, and every pod event.
func (c *evCase) details() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("== %s: %s, %s", c.pod, c.shape, c.kind)
	if c.recordingFailed != "" {
		p("NOT RECORDED: %s", c.recordingFailed)
	}
	for _, cg := range c.cgroups {
		p("old cgroup %-14s %s", hierarchyName(cg.Hierarchy), cg.Dir)
	}
	for _, pr := range c.procs {
		p("old process  %s", pr)
	}
	p("every PID in the old cgroups before the kill: %v", c.all)
	for _, pr := range c.others {
		p("beside it    %s", pr)
	}
	if !c.t0.IsZero() {
		p("t0 %s: %s to the main process (pid %d) from the host", c.t0.UTC().Format("15:04:05.000"), c.kind.signalName(), c.role("main").PID)
	}
	if c.term != nil {
		p("old container %s terminated: exit %d, reason %s, shown first at %s in the pod's %s", shortID(c.oldID), c.term.ExitCode, c.term.Reason, ms(c.termAt.Sub(c.t0)), c.termSrc)
		p("  sample then: %s", c.atTerm)
	}
	if c.atNew != nil {
		p("new container %s, restartCount %d -> %d, shown first at %s", shortID(c.newID), c.oldRest, c.newRest, ms(c.newAt.Sub(c.t0)))
		p("  sample then: %s", c.atNew)
	}
	if c.poll != nil {
		c.poll.mu.Lock()
		var dead []string
		for _, pr := range append(c.procs, c.others...) {
			a, ok := c.poll.alive[pr.Role]
			if !ok {
				a = -1
			}
			d, ok := c.poll.dead[pr.Role]
			if !ok {
				d = -1
			}
			dead = append(dead, fmt.Sprintf("%s %s / %s / %s", pr.Role, sampledOrNever(a), sampledOrNever(d), sampledOrNever(reapedOf(c.poll.reaped, pr.Role))))
		}
		n, empty, removed := len(c.poll.times), c.poll.empty, c.poll.removed
		c.poll.mu.Unlock()
		p("sampler (%d samples, every 1 ms, longest gap %s): last seen alive / first seen dead / first seen reaped: %s; cgroup first empty %s, removed %s", n, sampledMs(c.poll.maxGap()), strings.Join(dead, ", "), sampledOrNever(empty), sampledOrNever(removed))
	}
	if c.rt != nil && c.oldID != "" {
		for _, e := range c.rt.of(c.oldID) {
			what := "exec'd process " + e.ID
			if e.ID == strings.TrimPrefix(c.oldID, "containerd://") {
				what = "init"
			}
			p("containerd /tasks/exit of the %s (pid %d, status %d): exited_at %s, published %s, received %s", what, e.PID, e.Status,
				sampledMs(e.ExitedAt.Sub(c.t0)), sampledMs(e.Published.Sub(c.t0)), sampledMs(e.Received.Sub(c.t0)))
		}
	}
	if c.exec != nil {
		p("kubectl exec client: %s", c.exec.result())
	}
	p("kubelet events: %q", c.killingEvents)
	p("watch restarts during the run: %d", c.watchRestarts)
	p("pod events (receive time from t0):")
	for _, o := range c.events {
		p("  %s", describeEvidencePod(o, c.t0))
	}
	return b.String()
}

// describeEvidencePod is one line per pod event, with each container's ID.
func describeEvidencePod(o podObs, t0 time.Time) string {
	var cs []string
	for _, list := range [][]corev1.ContainerStatus{o.Pod.Status.InitContainerStatuses, o.Pod.Status.ContainerStatuses} {
		for _, s := range list {
			st := "waiting"
			switch {
			case s.State.Running != nil:
				st = "running"
			case s.State.Terminated != nil:
				st = fmt.Sprintf("terminated(exit=%d,reason=%s)", s.State.Terminated.ExitCode, s.State.Terminated.Reason)
			case s.State.Waiting != nil:
				st = "waiting(" + s.State.Waiting.Reason + ")"
			}
			last := ""
			if lt := s.LastTerminationState.Terminated; lt != nil {
				last = fmt.Sprintf(" last=%s:exit=%d,%s", shortID(lt.ContainerID), lt.ExitCode, lt.Reason)
			}
			cs = append(cs, fmt.Sprintf("%s:%s:%s restarts=%d ready=%v%s", s.Name, shortID(s.ContainerID), st, s.RestartCount, s.Ready, last))
		}
	}
	at := "before t0"
	if !t0.IsZero() {
		at = fmt.Sprintf("%+9.3fs", o.At.Sub(t0).Seconds())
	}
	return fmt.Sprintf("%s %-8s rv=%s phase=%s [%s]", at, o.Type, o.Pod.ResourceVersion, o.Pod.Status.Phase, strings.Join(cs, "; "))
}

func hierarchyName(h string) string {
	if h == "" {
		return "unified"
	}
	return h
}

// shortID is a containerID's first 12 hex digits, "-" when empty.
func shortID(id string) string {
	id = strings.TrimPrefix(id, "containerd://")
	if id == "" {
		return "-"
	}
	return id[:min(12, len(id))]
}

// sampledMs is a sampler time: tenths of milliseconds.
func sampledMs(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func sampledOrNever(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return sampledMs(d)
}
