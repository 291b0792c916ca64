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
