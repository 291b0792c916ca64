package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

var (
	slotMovedLine = regexp.MustCompile(`^slot (\d+): (\S+) token (\d+) -> (\S+) token (\d+)$`)
	slotKeptLine  = regexp.MustCompile(`^slot (\d+): (\S+) token (\d+) \(kept\)$`)
	shardRejected = regexp.MustCompile(`^shard (\d+) rejected token (\d+) from (\S+)$`)
)

// checkSlotSummary fails the test for each way the slot demo's closing lines (one per slot,
// then the shard's refusal) and the output out around them are not what the demo does.
func checkSlotSummary(t *testing.T, lines []string, out string) {
	t.Helper()
	for _, p := range slotSummaryProblems(lines, out) {
		t.Errorf("slot demo: %s", p)
	}
	if t.Failed() {
		t.Logf("output:\n%s", out)
	}
}

// slotSummaryProblems says what is wrong with the slot demo's closing lines: slots 0 and 2
// moved to pods that held no slot before, with larger tokens; slot 1 kept; three distinct
// holders after; shard 2 refused slot 2's old token from its old holder; and out shows each
// moved slot's old term ended at once, kubectl get's Slots column 3/3 and kubectl dlock get's
// NAME[i] rows.
func slotSummaryProblems(lines []string, out string) []string {
	if len(lines) != slotCount+1 {
		return []string{fmt.Sprintf("%d closing lines, want %d: one per slot and the shard's refusal", len(lines), slotCount+1)}
	}
	var problems []string
	type term struct {
		pod   string
		token int64
	}
	before, after := make([]term, slotCount), make([]term, slotCount)
	for i, l := range lines[:slotCount] {
		if m := slotMovedLine.FindStringSubmatch(l); m != nil && m[1] == strconv.Itoa(i) {
			before[i], after[i] = term{m[2], atoi(m[3])}, term{m[4], atoi(m[5])}
		} else if m := slotKeptLine.FindStringSubmatch(l); m != nil && m[1] == strconv.Itoa(i) {
			before[i] = term{m[2], atoi(m[3])}
			after[i] = before[i]
		} else {
			problems = append(problems, fmt.Sprintf("line %q, want `slot %d: <pod> token <n> -> <pod> token <m>` or `slot %d: <pod> token <n> (kept)`", l, i, i))
			continue
		}
		moved := i != 1
		switch {
		case moved && (after[i] == before[i]):
			problems = append(problems, fmt.Sprintf("slot %d kept %s, want it moved: its holder was deleted", i, before[i].pod))
		case moved && after[i].token <= before[i].token:
			problems = append(problems, fmt.Sprintf("slot %d: token %d -> %d, want a larger token", i, before[i].token, after[i].token))
		case !moved && after[i] != before[i]:
			problems = append(problems, fmt.Sprintf("slot %d moved from %s to %s, want it kept", i, before[i].pod, after[i].pod))
		}
	}
	if len(problems) > 0 {
		return problems
	}
	var pods []string
	for i := range after {
		for _, b := range before {
			if after[i] != before[i] && after[i].pod == b.pod {
				problems = append(problems, fmt.Sprintf("slot %d went to %s, which held a slot before: want a waiting pod", i, b.pod))
			}
		}
		if slices.Contains(pods, after[i].pod) {
			problems = append(problems, fmt.Sprintf("%s holds two slots, want at most one", after[i].pod))
		}
		pods = append(pods, after[i].pod)
	}
	if m := shardRejected.FindStringSubmatch(lines[slotCount]); m == nil {
		problems = append(problems, fmt.Sprintf("line %q, want `shard 2 rejected token <n> from <pod>`", lines[slotCount]))
	} else if m[1] != "2" || atoi(m[2]) != before[2].token || m[3] != before[2].pod {
		problems = append(problems, fmt.Sprintf("shard %s rejected token %s from %s, want shard 2, token %d from %s", m[1], m[2], m[3], before[2].token, before[2].pod))
	}
	for _, i := range []int{0, 2} {
		ended := regexp.MustCompile(fmt.Sprintf(`(?m)^slot %d: %s's term \(token %d\) ended: (HolderReleased|HolderTerminated); %s holds it with token %d$`,
			i, regexp.QuoteMeta(before[i].pod), before[i].token, regexp.QuoteMeta(after[i].pod), after[i].token))
		if !ended.MatchString(out) {
			problems = append(problems, fmt.Sprintf("the output does not say slot %d's old term ended at once (HolderReleased or HolderTerminated)", i))
		}
	}
	if !regexp.MustCompile(`(?m)^` + slotLock + `\s+\S+\s+\d+\s+Held\s+3/3\s`).MatchString(out) {
		problems = append(problems, "the output shows no `kubectl get dlock` row with Slots 3/3")
	}
	for i := range slotCount {
		if !strings.Contains(out, fmt.Sprintf("\n%s[%d] ", slotLock, i)) {
			problems = append(problems, fmt.Sprintf("the output shows no `kubectl dlock get` row %s[%d]", slotLock, i))
		}
	}
	return problems
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// TestSlotSummaryProblems: the check of the slot demo's closing lines accepts what the demo
// prints and names each way it can go wrong.
func TestSlotSummaryProblems(t *testing.T) {
	out := `ingest-shards   ingest-0   6       Held    3/3     5            20s
slot 0: ingest-0's term (token 6) ended: HolderReleased; ingest-3 holds it with token 20
slot 2: ingest-2's term (token 9) ended: HolderTerminated; ingest-4 holds it with token 21
ingest-shards[0]   ingest-3   20      Held    -           25s
ingest-shards[1]   ingest-1   7       Held    -           25s
ingest-shards[2]   ingest-4   21      Held    -           25s
`
	good := []string{
		"slot 0: ingest-0 token 6 -> ingest-3 token 20",
		"slot 1: ingest-1 token 7 (kept)",
		"slot 2: ingest-2 token 9 -> ingest-4 token 21",
		"shard 2 rejected token 9 from ingest-2",
	}
	with := func(i int, l string) []string {
		ls := slices.Clone(good)
		ls[i] = l
		return ls
	}
	for _, tc := range []struct {
		name  string
		lines []string
		out   string
		want  string // in the problems; "" for none
	}{
		{"as printed", good, out, ""},
		{"a line missing", good[1:], out, "3 closing lines"},
		{"slot 0 kept", with(0, "slot 0: ingest-0 token 6 (kept)"), out, "slot 0 kept ingest-0"},
		{"slot 1 moved", with(1, "slot 1: ingest-1 token 7 -> ingest-3 token 22"), out, "slot 1 moved"},
		{"smaller token", with(2, "slot 2: ingest-2 token 9 -> ingest-4 token 8"), out, "want a larger token"},
		{"out of order", with(0, "slot 2: ingest-2 token 9 -> ingest-4 token 21"), out, "want `slot 0:"},
		{"to a holder of another slot", with(2, "slot 2: ingest-2 token 9 -> ingest-1 token 21"), out, "which held a slot before"},
		{"two slots to one pod", with(2, "slot 2: ingest-2 token 9 -> ingest-3 token 21"), out, "ingest-3 holds two slots"},
		{"wrong shard", with(3, "shard 0 rejected token 9 from ingest-2"), out, "want shard 2, token 9 from ingest-2"},
		{"wrong token", with(3, "shard 2 rejected token 6 from ingest-2"), out, "want shard 2, token 9 from ingest-2"},
		{"no refusal", with(3, "shard 2 accepted token 9"), out, "want `shard 2 rejected"},
		{"ended after the delay", good, strings.Replace(out, "HolderTerminated", "LockDelayElapsed", 1), "slot 2's old term ended at once"},
		{"no Slots column", good, strings.Replace(out, "3/3", "2/3", 1), "Slots 3/3"},
		{"no slot rows", good, strings.Replace(out, "ingest-shards[1]", "ingest-shards", 1), "row ingest-shards[1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(slotSummaryProblems(tc.lines, tc.out), "\n")
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("slotSummaryProblems = %q, want problems containing %q", got, tc.want)
			}
		})
	}
}

// TestViewRows: a lock of one slot is one line, unchanged; a lock of several is one line per
// slot, NAME[i], each with its own slot's phase, holder and token, including a slot listed
// above spec.slots while it ends.
func TestViewRows(t *testing.T) {
	one := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: "payments-leader"},
		Status: lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, Holder: "payments-0", FencingToken: 4}}
	three := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: "ingest-shards"}, Spec: lockv1.DistributedLockSpec{Slots: 3},
		Status: lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, Holder: "ingest-0", FencingToken: 6,
			Slots: []lockv1.SlotStatus{{Index: 2, Phase: lockv1.PhaseReleasing, Holder: "ingest-2", FencingToken: 9}}}}
	shrunk := three.DeepCopy()
	shrunk.Spec.Slots = 1
	for _, tc := range []struct {
		name string
		l    *lockv1.DistributedLock
		want []string
	}{
		{"one slot", one, []string{"payments-leader phase=Held holder=payments-0 token=4"}},
		{"three slots", three, []string{
			"ingest-shards[0] phase=Held holder=ingest-0 token=6",
			"ingest-shards[1] phase=- holder=- token=0",
			"ingest-shards[2] phase=Releasing holder=ingest-2 token=9",
		}},
		{"lowered to one while slot 2 ends", shrunk, []string{
			"ingest-shards[0] phase=Held holder=ingest-0 token=6",
			"ingest-shards[1] phase=- holder=- token=0",
			"ingest-shards[2] phase=Releasing holder=ingest-2 token=9",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range viewRows(tc.l) {
				got = append(got, strings.Join(strings.Fields(r.line), " "))
				if !strings.HasPrefix(strings.TrimSpace(r.line), r.key+" ") {
					t.Errorf("row keyed %q shows %q, want the key first", r.key, r.line)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("viewRows = %q, want %q", got, tc.want)
			}
		})
	}
}
