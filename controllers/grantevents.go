package controllers

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Grant Events are rate limited: creating 10,000 locks at once would otherwise create
// 10,000 Events within seconds, each an API write competing with the status writes that
// publish the grants. The limit is a token bucket per controller replica; what it holds back
// is never dropped silently:
//
//   - the first grant whose Event is held back gets an Event of reason GrantEventsLimited
//     instead, which names its holder and token and says that further grant Events are
//     limited and where the grants are recorded;
//   - every grant is in its lock's status (holder, token, history, the Held condition),
//     which is written before any Event;
//   - lockwarden_grant_events_limited_total counts the grants whose Event was not sent.
//
// Once the bucket is full again (the burst is over), the next limited grant gets a new
// GrantEventsLimited Event. Warnings and the Events of term ends are not limited.
const (
	// ReasonGrantEventsLimited is the reason of the Event that stands for a grant's own Event
	// when grant Events start being limited.
	ReasonGrantEventsLimited = "GrantEventsLimited"
	// DefaultGrantEventRate is the sustained rate of grant Events, per second.
	DefaultGrantEventRate = 10
	// DefaultGrantEventBurst is how many grant Events may be sent at once.
	DefaultGrantEventBurst = 100
)

// eventBudget is the token bucket of grant Events.
type eventBudget struct {
	mu      sync.Mutex
	now     func() time.Time
	rate    float64
	burst   float64
	tokens  float64
	last    time.Time
	limited bool // a GrantEventsLimited Event was sent since the bucket was last full
}

func newEventBudget(rate float64, burst int, now func() time.Time) *eventBudget {
	return &eventBudget{now: now, rate: rate, burst: float64(burst), tokens: float64(burst), last: now()}
}

// take spends one token: send reports whether the grant's Event may be sent, notice
// whether the GrantEventsLimited Event is due instead.
func (b *eventBudget) take() (send, notice bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.now()
	b.tokens = min(b.burst, b.tokens+n.Sub(b.last).Seconds()*b.rate)
	b.last = n
	if b.tokens >= b.burst {
		b.limited = false
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, false
	}
	notice = !b.limited
	b.limited = true
	return false, notice
}

// grantEvent queues the Event of a grant of pod with token for after the status write,
// within the grant Event budget.
func (t *turn) grantEvent(pod *corev1.Pod, reason string, token int64) {
	r := t.r
	t.events = append(t.events, func() {
		send, notice := r.grantEvents.take()
		switch {
		case send:
			r.Recorder.Eventf(t.lock, pod, corev1.EventTypeNormal, reason, "Grant", "granted to %s with token %d", pod.Name, token)
		case notice:
			r.Recorder.Eventf(t.lock, pod, corev1.EventTypeNormal, ReasonGrantEventsLimited, "Grant",
				"granted to %s with token %d; grant Events are rate limited (%.0f/s, burst %.0f) while this many locks are granted at once: each grant is recorded in its lock's status (holder, token, history) and lockwarden_grant_events_limited_total counts the grants whose Event was not sent",
				pod.Name, token, r.grantEvents.rate, r.grantEvents.burst)
		default:
			r.Metrics.grantEventLimited()
		}
	})
}
