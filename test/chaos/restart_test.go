package chaos

import (
	"testing"
	"time"
)

func TestCheckRestarts(t *testing.T) {
	rule := RestartRule{Wait: 3 * time.Second, Slack: 500 * time.Millisecond, React: 2 * time.Second}
	ms := int64(time.Millisecond)
	// The crash at 10 s, the restarted worker Ready at 10.8 s.
	proof := Restart{UID: "a", Pod: "pod-a", Token: 5, Proof: true, Crash: 10 * sec, Ready: 10*sec + 800*ms}
	sidecar := proof
	sidecar.Proof = false
	abandoned := proof
	abandoned.Abandoned = true
	late := proof
	late.Ready = 12*sec + 500*ms // Ready 2 s into a Releasing phase of 3 s
	tests := []struct {
		name string
		obs  []StatusObs
		r    Restart
		want string // substring of the violation; "" for none
	}{
		{"fast path from Releasing", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 10*sec+300*ms), held(3, "a", 9, 11*sec)}, proof, ""},
		{"fast path from Held", []StatusObs{held(1, "a", 5, 1*sec), held(2, "a", 9, 11*sec)}, proof, ""},
		{"proof, old token back", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 10*sec+300*ms), held(3, "a", 5, 11*sec)}, proof, "got the old token back"},
		{"proof, term never ends", []StatusObs{held(1, "a", 5, 1*sec)}, proof, "never ended"},
		{"proof, term ends too late", []StatusObs{held(1, "a", 5, 1*sec), held(2, "a", 9, 20*sec)}, proof, "the restart kept the token"},
		{"proof, another pod at once", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 10*sec+300*ms), held(3, "b", 9, 11*sec)}, proof, "not to the same pod with a new token"},
		{"proof, another pod after the delay", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 10*sec+300*ms), {RV: 3, Phase: "Pending", Mono: 13*sec + 400*ms}, held(4, "b", 9, 13*sec+500*ms)},
			proof, "not to the same pod with a new token"},
		{"proof, abandoned: the slow path is right", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 10*sec+300*ms), held(3, "b", 9, 13*sec+400*ms)}, abandoned, ""},
		{"proof, Ready late in Releasing", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 10*sec+300*ms), held(3, "b", 9, 13*sec+400*ms)}, late, ""},
		{"sidecar, the full delay, then another pod", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 10*sec+300*ms), held(3, "b", 9, 13*sec+400*ms)}, sidecar, ""},
		{"sidecar, the full delay, then the same pod", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 10*sec+300*ms), held(3, "a", 9, 13*sec+400*ms)}, sidecar, ""},
		{"sidecar, another pod before the delay", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 10*sec+300*ms), held(3, "b", 9, 11*sec)}, sidecar, "after 700ms of Releasing"},
		{"sidecar, same pod new token at once", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 10*sec+300*ms), held(3, "a", 9, 11*sec)}, sidecar, "no proof (native sidecar)"},
		{"sidecar, no Releasing at all", []StatusObs{held(1, "a", 5, 1*sec), held(2, "a", 9, 11*sec)}, sidecar, "after 0s of Releasing"},
		{"sidecar, old token back", []StatusObs{held(1, "a", 5, 1*sec), releasing(2, "a", 5, 10*sec+300*ms), held(3, "a", 5, 11*sec)}, sidecar, "got the old token back"},
		{"a term that ended before the crash is not judged", []StatusObs{held(1, "a", 5, 1*sec), held(2, "b", 9, 2*sec)}, proof, ""},
		{"a token never observed is not judged", []StatusObs{held(1, "b", 4, 1*sec)}, proof, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expect(t, CheckRestarts(tt.obs, []Restart{tt.r}, rule), tt.want)
		})
	}
}
