package migrate_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

var update = flag.Bool("update", false, "rewrite the ```diff blocks of docs/migration.md from the programs")

// updateHint is how to regenerate the guide's diff blocks.
const updateHint = "go test ./examples/migrate -run TestGuideDiffs -update"

// diffTool is GNU diff; --label keeps the headers free of temporary paths and dates.
const diffTool = "/usr/bin/diff"

// pairs are the guide's migrations: examples/migrate/<pair>/before and .../after.
var pairs = []string{"clientgo", "controller-runtime"}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestProgramsBuild builds each program of the guide as the reader would.
func TestProgramsBuild(t *testing.T) {
	root, goBin := moduleRoot(t), goTool(t)
	out := filepath.Join(t.TempDir(), "x")
	for _, pair := range pairs {
		for _, side := range []string{"before", "after"} {
			pkg := "./examples/migrate/" + pair + "/" + side
			t.Run(pair+"/"+side, func(t *testing.T) {
				cmd := exec.CommandContext(t.Context(), goBin, "build", "-o", out, pkg)
				cmd.Dir = root
				if msg, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("go build -o %s %s: %v\n%s", out, pkg, err, msg)
				}
			})
		}
	}
}

// TestGuideDiffs checks that each ```diff block of docs/migration.md is `diff -u` of its
// programs, so the guide shows code that TestProgramsBuild compiles; -update rewrites them.
func TestGuideDiffs(t *testing.T) {
	root := moduleRoot(t)
	path := filepath.Join(root, "docs", "migration.md")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read guide: %v", err)
	}
	doc := string(raw)
	blocks, err := diffBlocks(doc)
	if err != nil {
		t.Fatalf("docs/migration.md: %v", err)
	}
	want := map[string]string{}
	for _, pair := range pairs {
		want[beforePath(pair)] = unifiedDiff(t, root, pair)
	}
	if *update {
		doc = replaceBlocks(doc, blocks, want)
		if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
			t.Fatalf("rewrite guide: %v", err)
		}
		t.Logf("rewrote the diff blocks of %s", path)
		if blocks, err = diffBlocks(doc); err != nil {
			t.Fatalf("docs/migration.md after -update: %v", err)
		}
	}
	seen := map[string]int{}
	for _, b := range blocks {
		seen[b.label]++
		w, ok := want[b.label]
		switch {
		case !ok:
			t.Errorf("docs/migration.md: a ```diff block starts with %q, want one of the before-programs (--- %s)", firstLine(b.body), beforePath(pairs[0]))
		case b.body != w:
			t.Errorf("docs/migration.md: the diff block of %s is not diff -u of its programs; regenerate it with\n\t%s\n%s",
				b.label, updateHint, firstDifference(b.body, w))
		}
	}
	for _, pair := range pairs {
		if n := seen[beforePath(pair)]; n != 1 {
			t.Errorf("docs/migration.md has %d ```diff blocks starting with --- %s, want 1 (add a block with that first line, then run %s)",
				n, beforePath(pair), updateHint)
		}
	}
}

// unifiedDiff is `diff -u` of a pair's programs, labelled with their paths from the module root.
func unifiedDiff(t *testing.T, root, pair string) string {
	t.Helper()
	if _, err := os.Stat(diffTool); err != nil {
		t.Fatalf("the guide check needs GNU diff at %s (Debian package diffutils): %v", diffTool, err)
	}
	before, after := beforePath(pair), afterPath(pair)
	cmd := exec.CommandContext(t.Context(), diffTool, "-u", "--label", before, "--label", after, before, after)
	cmd.Dir = root
	out, err := cmd.Output()
	var exit *exec.ExitError
	switch {
	case err == nil:
		t.Fatalf("%s and %s are identical: the guide has nothing to show", before, after)
	case errors.As(err, &exit) && exit.ExitCode() == 1: // the files differ: that is the diff
	default:
		t.Fatalf("diff -u %s %s: %v\n%s", before, after, err, exitStderr(err))
	}
	return string(out)
}

func beforePath(pair string) string { return "examples/migrate/" + pair + "/before/main.go" }
func afterPath(pair string) string  { return "examples/migrate/" + pair + "/after/main.go" }

// exitStderr returns what a failed command wrote to stderr, when Output captured it.
func exitStderr(err error) string {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(exit.Stderr)
	}
	return ""
}

// moduleRoot is the nearest directory above the working directory holding go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatalf("get working directory: %v", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the working directory")
		}
		dir = parent
	}
}

// goTool finds the go command: on PATH, else in $GOROOT/bin.
func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	t.Fatal("the go command is neither on PATH nor in $GOROOT/bin")
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// block is one ```diff block of a Markdown document.
type block struct {
	label      string // the path on the first line, "--- <path>"; "" when it has none
	body       string // the text between the fences, every line ending in "\n"
	start, end int    // byte offsets of body in the document
}

// errUnclosed is returned by diffBlocks for a ```diff fence that is never closed.
var errUnclosed = errors.New("unclosed ```diff block")

// diffBlocks returns the ```diff blocks of a Markdown document, in order.
func diffBlocks(doc string) ([]block, error) {
	var out []block
	var open *block
	off := 0
	for line := range strings.SplitAfterSeq(doc, "\n") {
		switch text := strings.TrimRight(line, "\r\n"); {
		case open == nil && text == "```diff":
			open = &block{start: off + len(line)}
		case open != nil && text == "```":
			open.end = off
			open.body = doc[open.start:open.end]
			if label, ok := strings.CutPrefix(firstLine(open.body), "--- "); ok {
				open.label = label
			}
			out = append(out, *open)
			open = nil
		}
		off += len(line)
	}
	if open != nil {
		return nil, fmt.Errorf("%w: it opens at line %d", errUnclosed, strings.Count(doc[:open.start], "\n"))
	}
	return out, nil
}

// replaceBlocks returns doc with the body of every block whose label is a key of bodies
// replaced by its value.
func replaceBlocks(doc string, blocks []block, bodies map[string]string) string {
	var b strings.Builder
	last := 0
	for _, blk := range blocks {
		if body, ok := bodies[blk.label]; ok {
			b.WriteString(doc[last:blk.start])
			b.WriteString(body)
			last = blk.end
		}
	}
	b.WriteString(doc[last:])
	return b.String()
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

// firstDifference describes the first line where the doc's block and the diff differ.
func firstDifference(doc, diff string) string {
	d, w := strings.Split(doc, "\n"), strings.Split(diff, "\n")
	for i := range max(len(d), len(w)) {
		if i >= len(d) || i >= len(w) || d[i] != w[i] {
			return fmt.Sprintf("first difference at line %d of the block:\n  doc:  %q\n  diff: %q", i+1, at(d, i), at(w, i))
		}
	}
	return ""
}

func at(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end of block)"
}
