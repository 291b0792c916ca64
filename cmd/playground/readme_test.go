package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The README's quick start shows the output of `make run ARGS=--demo-and-exit` between these
// markers; TestDemoAndExit checks that every line shown there has the shape of a line the
// playground prints now.
const (
	demoBegin = "<!-- demo: begin -->"
	demoEnd   = "<!-- demo: end -->"
)

// readmeMaxLines is issue 25's bound: the README is for users, the rest is in docs/.
const readmeMaxLines = 300

// readme returns the README's text.
func readme(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readmeDemo returns the lines of the README's demo output block.
func readmeDemo(t *testing.T) []string {
	t.Helper()
	s := readme(t)
	i, j := strings.Index(s, demoBegin), strings.Index(s, demoEnd)
	if i < 0 || j < i {
		t.Fatalf("README.md has no %s ... %s block", demoBegin, demoEnd)
	}
	block := strings.TrimSpace(s[i+len(demoBegin) : j])
	block = strings.TrimPrefix(block, "```")
	block = strings.TrimSuffix(block, "```")
	var lines []string
	for l := range strings.SplitSeq(strings.TrimSpace(block), "\n") {
		if l = strings.TrimSpace(l); l != "" && l != "..." {
			lines = append(lines, l)
		}
	}
	if len(lines) < 5 {
		t.Fatalf("README.md's demo block has %d lines, want the playground's output:\n%s", len(lines), block)
	}
	return lines
}

// shapeRules turn a line of output into its shape: what differs from run to run (times,
// numbers, UIDs, writer IDs, addresses) becomes a placeholder.
var shapeRules = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`), "<uid>"},
	{regexp.MustCompile(`\b[0-9a-f]{16}\b`), "<hex>"},
	{regexp.MustCompile(`\d+(\.\d+)?(ms|µs|s|m)\b`), "<dur>"},
	{regexp.MustCompile(`\d+`), "<n>"},
	// Which proof ends the deleted holder's term depends on the race between the controller's
	// turn on the holder's release and the stand-in kubelet's exit report and pod delete: the
	// release while the pod still exists (HolderReleased), or the terminal update once it is
	// gone (HolderTerminated); both end it at once.
	{regexp.MustCompile(`term ended: (HolderReleased|HolderTerminated)\b`), "term ended: <at once>"},
	{regexp.MustCompile(`\s+`), " "},
}

// mayBeAbsent reports whether a line of the README's demo may be missing from a run: the
// Releasing that the turn on the deletion publishes shows only when that turn comes before
// the holder's release and its pod's terminal update (the view polls every 50 ms).
func mayBeAbsent(shaped string) bool { return strings.Contains(shaped, " phase=Releasing ") }

// shape is line with every run-dependent part replaced.
func shape(line string) string {
	for _, r := range shapeRules {
		line = r.re.ReplaceAllString(line, r.with)
	}
	return strings.TrimSpace(line)
}

// TestShape: the placeholders cover what changes between runs, and nothing else.
func TestShape(t *testing.T) {
	for _, tc := range []struct{ a, b string }{
		{"13:02:12.479 lock  reports-leader   phase=Held      holder=reports-0    token=4",
			"09:11:02.001 lock  reports-leader   phase=Held      holder=reports-1    token=17"},
		{"new holder published 118ms after the deletion (polled every 50 ms)",
			"new holder published 1.2s after the deletion (polled every 50 ms)"},
		{"new holder published 125ms after the deletion (polled every 50 ms); payments-0's term ended: HolderTerminated",
			"new holder published 97ms after the deletion (polled every 50 ms); payments-0's term ended: HolderReleased"},
		{"token 5 from pod payments-0 (uid 5779ff59-8a59-4c88-a9b6-936c4160f8d6) is stale",
			"token 7 from pod payments-2 (uid 00000000-1111-2222-3333-444444444444) is stale"},
	} {
		if shape(tc.a) != shape(tc.b) {
			t.Errorf("shape(%q) = %q, shape(%q) = %q: want equal", tc.a, shape(tc.a), tc.b, shape(tc.b))
		}
	}
	if a, b := "payments-0's term ended: HolderReleased", "payments-0's term ended: HolderRestarted"; shape(a) == shape(b) {
		t.Errorf("shape(%q) = shape(%q): only the two ends at once are one shape", a, b)
	}
	if a, b := "phase=Held holder=payments-1", "phase=Releasing holder=payments-1"; shape(a) == shape(b) {
		t.Errorf("shape(%q) = shape(%q): a phase is not a placeholder", a, b)
	}
}

// checkDemoShown fails for each line of the README's demo block whose shape no line of out
// has: the README shows what the playground prints.
func checkDemoShown(t *testing.T, out string) {
	t.Helper()
	have := map[string]bool{}
	for l := range strings.SplitSeq(out, "\n") {
		have[shape(l)] = true
	}
	for _, l := range readmeDemo(t) {
		if !have[shape(l)] && !mayBeAbsent(shape(l)) {
			t.Errorf("README.md's demo shows a line the playground no longer prints:\n  %s\n(shape %q)", l, shape(l))
		}
	}
}

// TestREADME: the README stays within its bound, every relative link in it and in docs/
// resolves, and every make target it names exists.
func TestREADME(t *testing.T) {
	r := root(t)
	s := readme(t)
	if n := strings.Count(s, "\n"); n > readmeMaxLines {
		t.Errorf("README.md has %d lines, want at most %d (move the rest to docs/)", n, readmeMaxLines)
	}
	readmeDemo(t)
	docs, _ := filepath.Glob(filepath.Join(r, "docs", "*.md"))
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)\s]*)?\)`)
	for _, f := range append([]string{filepath.Join(r, "README.md")}, docs...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), target)); err != nil {
				rel, _ := filepath.Rel(r, f)
				t.Errorf("%s links %s, which does not exist", rel, target)
			}
		}
	}
	mk, err := os.ReadFile(filepath.Join(r, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*)\s*:`).FindAllStringSubmatch(string(mk), -1) {
		targets[m[1]] = true
	}
	// `make X` in backticks, or a line of a code block starting with make X
	inline, code := regexp.MustCompile("`make ([a-z][a-z0-9-]*)"), regexp.MustCompile(`^\s*make ([a-z][a-z0-9-]*)`)
	inBlock := false
	for l := range strings.SplitSeq(s, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inBlock = !inBlock
			continue
		}
		ms := inline.FindAllStringSubmatch(l, -1)
		if inBlock {
			ms = append(ms, code.FindAllStringSubmatch(l, -1)...)
		}
		for _, m := range ms {
			if !targets[m[1]] {
				t.Errorf("README.md says `make %s`, which the Makefile does not define", m[1])
			}
		}
	}
}
