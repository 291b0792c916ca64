//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/test/chaos"
)

// TestE2E deploys lockwarden on a real node as a user would and runs each scenario on real
// pods, then checks the whole recording with the chaos suite's checkers: strictly growing
// tokens across grants, and a ledger that never accepted a stale token.
func TestE2E(t *testing.T) {
	n := startNode(t, "lockwarden-e2e")
	c := deploy(t, n)
	t0 := time.Now()
	report := &e2eReport{}
	for _, sc := range []struct {
		name string
		run  func(*testing.T, *cluster, *e2eReport)
	}{
		{"delete-holder", scenarioDeleteHolder},
		{"rollout-restart", scenarioRolloutRestart},
		{"delete-holder-attested", scenarioDeleteHolderAttested},
		{"manager-failover", scenarioManagerFailover},
		{"kill-holder-process", scenarioKillHolderProcess},
		{"late-write-of-dead-process", scenarioLateWriteOfDeadProcess},
		{"readiness-fails", scenarioReadinessFails},
		{"kubelet-stopped", scenarioKubeletStopped},
		{"node-deleted", scenarioNodeDeleted},
		{"stamper", scenarioStamper},
	} {
		start := time.Now()
		t.Run(sc.name, func(t *testing.T) { sc.run(t, c, report) })
		t.Logf("scenario %s: %v", sc.name, time.Since(start).Round(time.Second))
	}

	_, locks := c.rec.since(mark{})
	t.Logf("terms over the whole run:\n%s", summary(terms(locks)))
	for _, v := range chaos.CheckTokens(statusObs(locks)) {
		t.Errorf("tokens: %s", v)
	}
	outs := c.outcomes(t)
	var chaosOuts []chaos.Outcome
	accepted := 0
	for _, o := range outs {
		chaosOuts = append(chaosOuts, chaos.Outcome{Op: o.Op, Token: o.Token, Writer: o.Writer, Accepted: o.Accepted})
		if o.Accepted {
			accepted++
		}
	}
	for _, v := range chaos.CheckLedger(chaosOuts) {
		t.Errorf("ledger: %s", v)
	}
	if accepted == 0 {
		t.Error("the ledger accepted no write: the workers never led")
	}
	t.Logf("ledger: %d decisions, %d accepted, %d refused; scenarios took %v", len(outs), accepted, len(outs)-accepted, time.Since(t0).Round(time.Second))
	report.write(t, filepath.Join(n.root, "bin", "e2e"))
}

// e2eReport collects the numbers and recordings docs/e2e.md quotes.
type e2eReport struct {
	lines []string
	files map[string]string
}

func (r *e2eReport) add(format string, args ...any) {
	r.lines = append(r.lines, fmt.Sprintf(format, args...))
}

func (r *e2eReport) file(name, text string) {
	if r.files == nil {
		r.files = map[string]string{}
	}
	r.files[name] = text
}

// write puts the report into dir (bin/e2e): report.txt and the recordings.
func (r *e2eReport) write(t testing.TB, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Errorf("write the report: %v", err)
		return
	}
	var text string
	for _, l := range r.lines {
		text += l + "\n"
	}
	t.Logf("report:\n%s", text)
	if err := os.WriteFile(filepath.Join(dir, "report.txt"), []byte(text), 0o644); err != nil {
		t.Errorf("write the report: %v", err)
	}
	for name, body := range r.files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Errorf("write %s: %v", name, err)
		}
	}
}

// ctxFor is a context for one step of a scenario.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
