package leadership

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// at is the instant s seconds after the pod's clock zero.
func at(s float64) instant { return instant(time.Duration(s * float64(time.Second))) }

const (
	gUID   = types.UID("lock-uid-1")
	gToken = int64(4711)
	gDelay = 30 * time.Second
)

// cread is a consistent read of the lock gUID sent at s showing round, vouching for
// roundToken, with held the token Held by this pod (0: none).
func cread(s float64, round, roundToken, held int64) globalRead {
	return globalRead{sent: at(s), received: at(s), consistent: true, lockUID: gUID, round: round, roundToken: roundToken, heldToken: held, delay: gDelay}
}

// event is the same observation arriving as a watch event or a cached read.
func event(s float64, round, roundToken, held int64) globalRead {
	o := cread(s, round, roundToken, held)
	o.consistent = false
	return o
}

// withDelay is o publishing lock delay d.
func withDelay(o globalRead, d time.Duration) globalRead {
	o.delay = d
	return o
}

func TestGlobalDeadline(t *testing.T) {
	m := 2 * time.Second // globalMargin(30 s, 0)
	other := gToken - 10 // the previous term's token
	tests := []struct {
		name  string
		reads []globalRead
		token int64
		want  instant
		why   globalRefusal
	}{
		{
			name: "round r-2 supplies S",
			reads: []globalRead{
				cread(0, 3, other, 0),
				cread(5, 4, gToken, gToken),
				cread(10, 5, gToken, gToken),
			},
			token: gToken, want: at(0).Add(gDelay - m),
		},
		{
			name: "the newest read at or below r-2 counts, not the oldest",
			reads: []globalRead{
				cread(0, 2, gToken, gToken),
				cread(4, 3, gToken, gToken),
				cread(8, 3, gToken, gToken),
				cread(12, 5, gToken, gToken),
			},
			token: gToken, want: at(8).Add(gDelay - m),
		},
		{
			name: "a read of round r-1 proves nothing",
			reads: []globalRead{
				cread(0, 4, gToken, gToken),
				cread(5, 5, gToken, gToken),
			},
			token: gToken, why: globalNoEarlier,
		},
		{
			// The manager confirmed the grant, sent round 6 and paused; the other cluster
			// took the grant; round 6 landed at 40 s. The reads of round 5 up to 39 s say
			// nothing about when round 6's confirmation was sent: S stays the read of 4.
			name: "late-landing round write does not extend from the reads just before it",
			reads: []globalRead{
				cread(0, 4, gToken, gToken),
				cread(10, 5, gToken, gToken),
				cread(20, 5, gToken, gToken),
				cread(39, 5, gToken, gToken),
				cread(40, 6, gToken, gToken),
			},
			token: gToken, want: at(0).Add(gDelay - m),
		},
		{
			name: "a watch event never supplies S",
			reads: []globalRead{
				cread(0, 3, gToken, gToken),
				event(9, 3, gToken, gToken),
				cread(10, 5, gToken, gToken),
			},
			token: gToken, want: at(0).Add(gDelay - m),
		},
		{
			name: "a watch event never supplies r",
			reads: []globalRead{
				cread(0, 3, gToken, gToken),
				cread(5, 4, gToken, gToken),
				cread(8, 4, gToken, gToken),
				event(9, 7, gToken, gToken),
			},
			token: gToken, why: globalNoEarlier,
		},
		{
			name: "cached reads and watch events alone never lead",
			reads: []globalRead{
				event(0, 1, gToken, gToken),
				event(5, 3, gToken, gToken),
				event(10, 5, gToken, gToken),
			},
			token: gToken, why: globalNoRound,
		},
		{
			// Rounds stopped at 5 (the manager is gone): every read shows 5, so S stays the
			// last read of round 3 and the bound does not move however often the pod reads.
			name: "a stale round: reads go on, the bound does not move",
			reads: []globalRead{
				cread(0, 3, gToken, gToken),
				cread(5, 4, gToken, gToken),
				cread(10, 5, gToken, gToken),
				cread(15, 5, gToken, gToken),
				cread(20, 5, gToken, gToken),
				cread(25, 5, gToken, gToken),
			},
			token: gToken, want: at(0).Add(gDelay - m),
		},
		{
			name: "a round that went down on the same object: nothing trusted",
			reads: []globalRead{
				cread(0, 3, gToken, gToken),
				cread(5, 6, gToken, gToken),
				cread(10, 5, gToken, gToken),
			},
			token: gToken, why: globalRegressed,
		},
		{
			name: "reads of an earlier object under the name do not count",
			reads: []globalRead{
				{sent: at(0), consistent: true, lockUID: "old-uid", round: 1, roundToken: other, delay: gDelay},
				cread(10, 3, gToken, gToken),
			},
			token: gToken, why: globalNoEarlier,
		},
		{
			name: "a round vouching for another token does not vouch for this term",
			reads: []globalRead{
				cread(0, 3, other, 0),
				cread(10, 5, other, gToken),
			},
			token: gToken, why: globalNoRound,
		},
		{
			name: "the newest read shows the term over",
			reads: []globalRead{
				cread(0, 3, gToken, gToken),
				cread(10, 5, gToken, gToken),
				cread(15, 5, gToken, 0),
			},
			token: gToken, why: globalNoRound,
		},
		{
			// Review finding L2: the Status rule ties D to the token, but should two reads of
			// one token show different delays, the pod waits for the lower one, not round r's.
			name: "the lowest delay any read showed for the token counts, not round r's",
			reads: []globalRead{
				cread(0, 3, other, 0),
				withDelay(cread(5, 4, gToken, gToken), 20*time.Second),
				cread(10, 5, gToken, gToken),
			},
			token: gToken, want: at(0).Add(20*time.Second - m),
		},
		{
			name: "a lower delay from a read that showed the token's round but not this pod Held counts too",
			reads: []globalRead{
				cread(0, 3, other, 0),
				withDelay(cread(3, 4, gToken, 0), 20*time.Second),
				cread(5, 4, gToken, gToken),
				cread(10, 5, gToken, gToken),
			},
			token: gToken, want: at(0).Add(20*time.Second - m),
		},
		{
			name: "another token's lower delay does not count",
			reads: []globalRead{
				withDelay(cread(0, 3, other, 0), 20*time.Second),
				cread(5, 4, gToken, gToken),
				cread(10, 5, gToken, gToken),
			},
			token: gToken, want: at(0).Add(gDelay - m),
		},
		{
			name:  "no reads",
			token: gToken, why: globalNoRound,
		},
		{
			name: "no token",
			reads: []globalRead{
				cread(0, 3, 0, 0),
				cread(10, 5, 0, 0),
			},
			token: 0, why: globalNoRound,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := globalDeadline(tt.reads, tt.token, 0)
			if why != tt.why || got != tt.want {
				t.Errorf("globalDeadline = %v, %v; want %v, %v", got.Sub(0), why, tt.want.Sub(0), tt.why)
			}
		})
	}
}

func TestGlobalDeadlineDelay(t *testing.T) {
	reads := func(d time.Duration) []globalRead {
		rs := []globalRead{cread(0, 3, gToken, gToken), cread(10, 5, gToken, gToken)}
		for i := range rs {
			rs[i].delay = d
		}
		return rs
	}
	tests := []struct {
		name   string
		delay  time.Duration
		margin time.Duration
		want   instant
		why    globalRefusal
	}{
		{name: "margin floor 2 s", delay: 30 * time.Second, want: at(28)},
		{name: "margin D/50", delay: 200 * time.Second, want: at(196)},
		{name: "a larger configured margin", delay: 30 * time.Second, margin: 5 * time.Second, want: at(25)},
		{name: "delay not above the margin", delay: 2 * time.Second, why: globalBadDelay},
		{name: "no delay published", delay: 0, why: globalBadDelay},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := globalDeadline(reads(tt.delay), gToken, tt.margin)
			if why != tt.why || got != tt.want {
				t.Errorf("globalDeadline(delay %v, margin %v) = %v, %v; want %v, %v", tt.delay, tt.margin, got.Sub(0), why, tt.want.Sub(0), tt.why)
			}
		})
	}
}

func TestGlobalValidUntil(t *testing.T) {
	reads := []globalRead{cread(0, 3, gToken, gToken), cread(10, 5, gToken, gToken)} // global bound 28 s
	tests := []struct {
		name      string
		inCluster instant
		reads     []globalRead
		want      instant
		why       globalRefusal
	}{
		{name: "the in-cluster bound is earlier", inCluster: at(23), reads: reads, want: at(23)},
		{name: "the global bound is earlier", inCluster: at(40), reads: reads, want: at(28)},
		{name: "equal", inCluster: at(28), reads: reads, want: at(28)},
		{name: "a refused global bound refuses the term whatever the in-cluster bound", inCluster: at(40), reads: reads[1:], why: globalNoEarlier},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := globalValidUntil(tt.inCluster, tt.reads, gToken, 0)
			if why != tt.why || got != tt.want {
				t.Errorf("globalValidUntil(%v) = %v, %v; want %v, %v", tt.inCluster.Sub(0), got.Sub(0), why, tt.want.Sub(0), tt.why)
			}
		})
	}
}

func TestGlobalMargin(t *testing.T) {
	tests := []struct{ delay, configured, want time.Duration }{
		{30 * time.Second, 0, 2 * time.Second},
		{100 * time.Second, 0, 2 * time.Second},
		{150 * time.Second, 0, 3 * time.Second},
		{30 * time.Second, 4 * time.Second, 4 * time.Second},
		{150 * time.Second, time.Second, 3 * time.Second},
	}
	for _, tt := range tests {
		if got := globalMargin(tt.delay, tt.configured); got != tt.want {
			t.Errorf("globalMargin(%v, %v) = %v, want %v", tt.delay, tt.configured, got, tt.want)
		}
	}
}
