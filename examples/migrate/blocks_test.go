package migrate_test

import (
	"errors"
	"testing"
)

func TestDiffBlocks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		doc     string
		labels  []string
		bodies  []string
		wantErr error
	}{
		{name: "none", doc: "# guide\n```go\nx\n```\n"},
		{
			name:   "two",
			doc:    "a\n```diff\n--- p/before/main.go\n+++ p/after/main.go\n```\nb\n```diff\n-x\n```\n",
			labels: []string{"p/before/main.go", ""},
			bodies: []string{"--- p/before/main.go\n+++ p/after/main.go\n", "-x\n"},
		},
		{name: "empty", doc: "```diff\n```\n", labels: []string{""}, bodies: []string{""}},
		{name: "unclosed", doc: "```diff\n--- p\n", wantErr: errUnclosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := diffBlocks(tc.doc)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("diffBlocks(%q) error = %v, want %v", tc.doc, err, tc.wantErr)
			}
			if len(got) != len(tc.labels) {
				t.Fatalf("diffBlocks(%q) = %d blocks, want %d", tc.doc, len(got), len(tc.labels))
			}
			for i, b := range got {
				if b.label != tc.labels[i] || b.body != tc.bodies[i] || tc.doc[b.start:b.end] != b.body {
					t.Errorf("block %d = %+v, want label %q body %q", i, b, tc.labels[i], tc.bodies[i])
				}
			}
		})
	}
}

func TestReplaceBlocks(t *testing.T) {
	doc := "a\n```diff\n--- p\nold\n```\nb\n```diff\n--- q\nkeep\n```\n"
	blocks, err := diffBlocks(doc)
	if err != nil {
		t.Fatal(err)
	}
	got := replaceBlocks(doc, blocks, map[string]string{"p": "--- p\nnew\nlines\n"})
	want := "a\n```diff\n--- p\nnew\nlines\n```\nb\n```diff\n--- q\nkeep\n```\n"
	if got != want {
		t.Errorf("replaceBlocks = %q, want %q", got, want)
	}
}

func TestFirstDifference(t *testing.T) {
	for _, tc := range []struct{ doc, diff, want string }{
		{"a\nb\n", "a\nb\n", ""},
		{"a\nb\n", "a\nc\n", "first difference at line 2 of the block:\n  doc:  \"b\"\n  diff: \"c\""},
		{"a\n", "a\nb\n", "first difference at line 2 of the block:\n  doc:  \"\"\n  diff: \"b\""},
	} {
		if got := firstDifference(tc.doc, tc.diff); got != tc.want {
			t.Errorf("firstDifference(%q, %q) = %q, want %q", tc.doc, tc.diff, got, tc.want)
		}
	}
}
