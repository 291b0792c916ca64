package chaos

import (
	"testing"
	"time"
)

const sec = int64(time.Second)

// held is an observation of pod-<uid>'s term of tok Held, seen at mono.
func held(rv uint64, uid string, tok, mono int64) StatusObs {
	return StatusObs{RV: rv, Phase: "Held", Holder: "pod-" + uid, HolderUID: uid, Token: tok, MaxToken: tok, Mono: mono}
}

// releasing is the same term seen Releasing.
func releasing(rv uint64, uid string, tok, mono int64) StatusObs {
	o := held(rv, uid, tok, mono)
	o.Phase = "Releasing"
	return o
}

func TestCheckHandoffs(t *testing.T) {
	rule := HandoffRule{Wait: 3 * time.Second, Slack: 500 * time.Millisecond}
	exited := []Life{{UID: "a", Start: 0, Exit: 10 * sec}, {UID: "b", Start: 0}}
	running := []Life{{UID: "a", Start: 0}, {UID: "b", Start: 0}}
	tests := []struct {
		name  string
		obs   []StatusObs
		lives []Life
		want  string // substring of the violation; "" for none
	}{
		{"attested: the process exited before the end", []StatusObs{held(1, "a", 5, 1*sec), held(2, "b", 7, 11*sec)}, exited, ""},
		{"slow path: Releasing for the wait", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 2*sec), held(3, "b", 7, 5*sec+sec/2)}, running, ""},
		{"Releasing, then pending, after the wait", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 2*sec), {RV: 3, Phase: "Pending", Mono: 6 * sec}}, running, ""},
		{"no term ends: a return to Held", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 2*sec), held(3, "a", 5, 3*sec)}, running, ""},
		{"ended while running, no Releasing", []StatusObs{held(1, "a", 5, 1*sec), held(2, "b", 7, 2*sec)}, running, "without Releasing since it was last Held"},
		{"ended after a short Releasing", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 2*sec), held(3, "b", 7, 3*sec)}, running, "after only 1s of Releasing"},
		{"a late Held write resets the wait", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 2*sec), held(3, "a", 5, 6*sec), held(4, "b", 7, 6*sec+sec/10)}, running, "without Releasing"},
		{"crash awaiting restart taken as proof", []StatusObs{held(1, "a", 5, 1*sec), held(2, "b", 7, 2*sec)},
			[]Life{{UID: "a", Start: 0, Exit: 2*sec - sec/2}, {UID: "a", Start: 2*sec + sec/4}, {UID: "b"}}, "was started again 250ms later"},
		{"exited only after the end", []StatusObs{held(1, "a", 5, 1*sec), held(2, "b", 7, 2*sec)},
			[]Life{{UID: "a", Start: 0, Exit: 3 * sec}, {UID: "b"}}, "it exited 1s later"},
		{"regrant of the same pod, new token", []StatusObs{held(1, "a", 5, 1*sec), held(2, "a", 9, 2*sec)}, running, ""},
		{"regrant, then another pod at once", []StatusObs{held(1, "a", 5, 1*sec), held(2, "a", 9, 2*sec), held(3, "b", 12, 3*sec)}, running, "token 9 ended at rv 3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, CheckHandoffs(tt.obs, tt.lives, rule), tt.want)
		})
	}
}

func TestCheckOverlaps(t *testing.T) {
	a := Interval{Pod: "a", UID: "ua", Token: 5, Start: 0, End: 2 * sec}
	tests := []struct {
		name string
		b    Interval
		want string
	}{
		{"none", Interval{Pod: "b", UID: "ub", Token: 7, Start: 2 * sec, End: 3 * sec}, ""},
		{"within tolerance", Interval{Pod: "b", UID: "ub", Token: 7, Start: 2*sec - sec/100, End: 3 * sec}, ""},
		{"beyond tolerance", Interval{Pod: "b", UID: "ub", Token: 7, Start: sec, End: 3 * sec}, "both led for 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			overlaps, _ := Overlaps([]Interval{a, tt.b})
			expect(t, CheckOverlaps(overlaps, 50*time.Millisecond), tt.want)
		})
	}
}
