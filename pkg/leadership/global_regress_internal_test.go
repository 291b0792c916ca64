package leadership

import "testing"

// TestGlobalRoundsRegressedRealTimeOnly: a round regression is a read sent after another's
// answer was received showing a lower round; reads whose flights overlap are ordered neither
// way, whatever their send times.
func TestGlobalRoundsRegressedRealTimeOnly(t *testing.T) {
	read := func(sent, received float64, round int64) globalRead {
		o := cread(sent, round, gToken, gToken)
		o.received = at(received)
		return o
	}
	tests := []struct {
		name  string
		reads []globalRead
		want  bool
	}{
		{"rising rounds", []globalRead{read(0, 1, 3), read(2, 3, 4)}, false},
		{"lower round sent after the higher one's answer", []globalRead{read(0, 1, 5), read(2, 3, 4)}, true},
		{"lower round sent before the higher one's answer (in flight together)", []globalRead{read(0, 3, 5), read(2, 4, 4)}, false},
		{"higher round sent first, answered after the lower one was sent", []globalRead{read(6, 8, 5), read(7, 7.5, 4)}, false},
		{"higher round answered, then a read sent showing lower", []globalRead{read(6, 6.5, 5), read(7, 7.5, 4)}, true},
		{"another object's lower round is no regression", []globalRead{read(0, 1, 5), func() globalRead { o := read(2, 3, 1); o.lockUID = "other"; return o }()}, false},
		{"equal readings prove no order", []globalRead{read(0, 1, 5), read(1, 2, 4)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := roundsRegressed(tt.reads, gUID); got != tt.want {
				t.Errorf("roundsRegressed = %v, want %v", got, tt.want)
			}
			_, why := globalDeadline(tt.reads, gToken, 0)
			if got := why == globalRegressed; got != tt.want {
				t.Errorf("globalDeadline refusal %v, regressed want %v", why, tt.want)
			}
		})
	}
}
