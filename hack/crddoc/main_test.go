package main

import "testing"

func TestReflow(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"joins a paragraph",
			"    description: |-\n      one two\n      three\n    type: string\n",
			"    description: |-\n      one two three\n    type: string\n"},
		{"keeps paragraph breaks",
			"  description: |-\n    a\n    b\n\n    c\n    d\n  type: object\n",
			"  description: |-\n    a b\n\n    c d\n  type: object\n"},
		{"keeps list items on their own lines and joins their continuation",
			"  description: |-\n    Modes:\n    - A: one\n      two\n    - B\n",
			"  description: |-\n    Modes:\n    - A: one\n      two\n    - B\n"},
		{"joins a list item's continuation at the same indent",
			"  description: |-\n    - A: one\n    two\n    1. x\n",
			"  description: |-\n    - A: one two\n    1. x\n"},
		{"leaves single-line descriptions and other keys alone",
			"  description: one line\n  x: |-\n    a\n    b\n",
			"  description: one line\n  x: |-\n    a\n    b\n"},
		{"stops at the next key of the same indent",
			"  description: |-\n    a\n    b\n  properties:\n    c:\n      description: |-\n        d\n        e\n",
			"  description: |-\n    a b\n  properties:\n    c:\n      description: |-\n        d e\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reflow(tt.in); got != tt.want {
				t.Errorf("reflow:\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}
