// Command crddoc reflows the descriptions of generated CRD manifests in place, so that
// `kubectl explain` shows flowing text: controller-gen copies each Go doc comment with its
// line breaks, and kubectl explain wraps those lines again, breaking sentences mid-line.
// Within a paragraph, lines are joined with a space; blank lines (paragraph breaks), list
// items ("- ", "* ", "1. ") and lines indented deeper than the paragraph stay on their own.
//
// Usage: go run ./hack/crddoc FILE...
package main

import (
	"fmt"
	"os"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: crddoc FILE...")
		os.Exit(2)
	}
	for _, f := range os.Args[1:] {
		if err := reflowFile(f); err != nil {
			fmt.Fprintln(os.Stderr, "crddoc:", err)
			os.Exit(1)
		}
	}
}

func reflowFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	out := reflow(string(data))
	if out == string(data) {
		return nil
	}
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat %s: %w", path, err)
	}
	if err := os.WriteFile(path, []byte(out), st.Mode().Perm()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// reflow rewrites every `description: |-` block scalar of a YAML document.
func reflow(doc string) string {
	lines := strings.Split(doc, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		out = append(out, lines[i])
		if strings.TrimSpace(lines[i]) != "description: |-" {
			continue
		}
		keyIndent := indentOf(lines[i])
		j := i + 1
		for j < len(lines) && (strings.TrimSpace(lines[j]) == "" || indentOf(lines[j]) > keyIndent) {
			j++
		}
		// trailing blank lines belong to what follows
		for j > i+1 && strings.TrimSpace(lines[j-1]) == "" {
			j--
		}
		out = append(out, reflowBlock(lines[i+1:j])...)
		i = j - 1
	}
	return strings.Join(out, "\n")
}

// reflowBlock joins the lines of each paragraph of one block scalar.
func reflowBlock(block []string) []string {
	if len(block) == 0 {
		return block
	}
	base := indentOf(block[0])
	var out []string
	joinable := false // the last output line is prose that the next prose line continues
	for _, l := range block {
		text := strings.TrimSpace(l)
		switch {
		case text == "":
			out = append(out, "")
			joinable = false
		case indentOf(l) > base:
			out = append(out, l)
			joinable = false
		case isListItem(text):
			out = append(out, l)
			joinable = true
		case joinable:
			out[len(out)-1] += " " + text
		default:
			out = append(out, l)
			joinable = true
		}
	}
	return out
}

func isListItem(s string) bool {
	if strings.HasPrefix(s, "- ") || strings.HasPrefix(s, "* ") {
		return true
	}
	n := 0
	for n < len(s) && s[n] >= '0' && s[n] <= '9' {
		n++
	}
	return n > 0 && n+1 < len(s) && (s[n] == '.' || s[n] == ')') && s[n+1] == ' '
}

func indentOf(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }
