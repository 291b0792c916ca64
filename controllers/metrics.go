package controllers

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// Metrics are the controller's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	transitions   *prometheus.CounterVec
	locks         *prometheus.GaugeVec
	grantLatency  prometheus.Histogram
	etcdErrors    *prometheus.CounterVec
	regressions   prometheus.Counter
	epoch         prometheus.Gauge
	active        prometheus.Gauge
	withoutHolder prometheus.Histogram
	eventsLimited prometheus.Counter
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockwarden_transitions_total", Help: "Term starts and ends, by reason.",
		}, []string{"reason"}),
		locks: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lockwarden_locks", Help: "DistributedLocks by published phase.",
		}, []string{"phase"}),
		grantLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lockwarden_grant_latency_seconds", Help: "From the reconcile that observed the trigger to the etcd commit of the grant.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		withoutHolder: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "lockwarden_time_without_holder_seconds", Help: "From the end of a term to the next grant, as this replica observed it.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}),
		etcdErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockwarden_etcd_errors_total", Help: "etcd calls that failed, by operation.",
		}, []string{"op"}),
		regressions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockwarden_token_regressions_total", Help: "Locks found with a token at or below status.maxFencingToken, or a controller epoch below status.controllerEpoch.",
		}),
		epoch: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lockwarden_controller_epoch", Help: "This replica's election token while it is active.",
		}),
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lockwarden_active", Help: "1 while this replica holds the controller election.",
		}),
		eventsLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lockwarden_grant_events_limited_total", Help: "Grants whose Event was not sent because grant Events were over their rate limit (each grant is in its lock's status).",
		}),
	}
	reg.MustRegister(m.transitions, m.locks, m.grantLatency, m.withoutHolder, m.etcdErrors, m.regressions, m.epoch, m.active, m.eventsLimited)
	return m
}

func (m *Metrics) transition(reason string) {
	if m != nil {
		m.transitions.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) granted(reason string, latency time.Duration) {
	if m != nil {
		m.transitions.WithLabelValues(reason).Inc()
		m.grantLatency.Observe(latency.Seconds())
	}
}

func (m *Metrics) unheld(d time.Duration) {
	if m != nil {
		m.withoutHolder.Observe(d.Seconds())
	}
}

func (m *Metrics) etcdError(op string) {
	if m != nil {
		m.etcdErrors.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) grantEventLimited() {
	if m != nil {
		m.eventsLimited.Inc()
	}
}

func (m *Metrics) tokenRegression() {
	if m != nil {
		m.regressions.Inc()
	}
}

// setActive records whether this replica is active, with its epoch.
func (m *Metrics) setActive(active bool, epoch int64) {
	if m == nil {
		return
	}
	if active {
		m.active.Set(1)
		m.epoch.Set(float64(epoch))
		return
	}
	m.active.Set(0)
}

func (m *Metrics) setPhases(n map[lockv1.Phase]int) {
	if m == nil {
		return
	}
	for _, p := range []lockv1.Phase{lockv1.PhasePending, lockv1.PhaseHeld, lockv1.PhaseReleasing, lockv1.PhaseSuspended} {
		m.locks.WithLabelValues(string(p)).Set(float64(n[p]))
	}
}
