package redischaos

import (
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	const ms = int64(time.Millisecond)
	margin := 200 * time.Millisecond
	tests := []struct {
		name       string
		h          history
		violations []string // substrings, in order
		refused    int
	}{
		{name: "clean handoffs", h: history{grants: []grant{
			{"a", 1, 0, 800 * ms}, {"b", 2, 900 * ms, 1700 * ms}, {"a", 3, 1800 * ms, 2000 * ms},
		}}},
		{name: "small overlap within the margin", h: history{grants: []grant{
			{"a", 1, 0, 1000 * ms}, {"b", 2, 900 * ms, 1700 * ms},
		}}},
		{name: "overlap beyond the margin", h: history{grants: []grant{
			{"a", 1, 0, 1000 * ms}, {"b", 2, 500 * ms, 1700 * ms},
		}}, violations: []string{"overlap: a (token 1) and b (token 2)"}},
		{name: "token went back", h: history{grants: []grant{
			{"a", 5, 0, 800 * ms}, {"b", 2, 900 * ms, 1700 * ms},
		}}, violations: []string{"token order: b got token 2 after token 5"}},
		{name: "forgetting restart excuses repeat and overlap, fence refuses", h: history{
			grants:  []grant{{"a", 5, 0, 800 * ms}, {"b", 1, 300 * ms, 1100 * ms}},
			writes:  []write{{"a", 5, 100 * ms, true}, {"b", 1, 400 * ms, false}},
			forgets: []int64{200 * ms},
		}, refused: 1},
		{name: "ledger accepted a lower token", h: history{
			writes: []write{{"a", 5, 100 * ms, true}, {"b", 4, 400 * ms, true}},
		}, violations: []string{"ledger: b's write with token 4 accepted after token 5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := check(tt.h, margin)
			if len(v.violations) != len(tt.violations) {
				t.Fatalf("check() violations = %q, want %d matching %q", v.violations, len(tt.violations), tt.violations)
			}
			for i, want := range tt.violations {
				if !strings.Contains(v.violations[i], want) {
					t.Errorf("violation %d = %q, want it to contain %q", i, v.violations[i], want)
				}
			}
			if v.refusedAfterForget != tt.refused {
				t.Errorf("refusedAfterForget = %d, want %d", v.refusedAfterForget, tt.refused)
			}
		})
	}
}

func TestStalls(t *testing.T) {
	const ms = int64(time.Millisecond)
	h := history{grants: []grant{
		{"a", 1, 0, 100 * ms}, {"b", 2, 110 * ms, 200 * ms}, // 10 ms: a handoff
		{"c", 3, 900 * ms, 1000 * ms},                                  // 700 ms: a stall
		{"d", 4, 1010 * ms, 3000 * ms}, {"e", 5, 1020 * ms, 1100 * ms}, // overlapping intervals: no gap
		{"f", 6, 3050 * ms, 3100 * ms},
		{"g", 7, 5000 * ms, 5100 * ms}, // 1900 ms, inside a pause window
	}}
	got := stalls(h, [][2]int64{{3500 * ms, 4000 * ms}}, 500*time.Millisecond)
	if len(got) != 1 || !strings.Contains(got[0], "700ms before c (token 3)") {
		t.Errorf("stalls = %q, want one, of 700ms before c", got)
	}
	if got := stalls(h, nil, 500*time.Millisecond); len(got) != 2 {
		t.Errorf("stalls without excuses = %q, want two", got)
	}
}
