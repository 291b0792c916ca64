package leadership

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// counters are the Elector's cumulative counts, read by its Collector at scrape time.
type counters struct {
	terms       atomic.Int64 // terms started (led), whether or not their callbacks ran
	readsOK     atomic.Int64
	readsFailed atomic.Int64
	released    atomic.Int64 // releases the API server applied
	refused     atomic.Int64 // releases it refused
	unknown     atomic.Int64 // releases without an answer (it may have applied them)
}

// release counts the outcome of one release request.
func (c *counters) release(err error) {
	switch {
	case err == nil:
		c.released.Add(1)
	case refusedRelease(err):
		c.refused.Add(1)
	default:
		c.unknown.Add(1)
	}
}

// masterStatusHelp is client-go's (controller-runtime's and component-base's) help text for
// leader_election_master_status. A registry refuses two descriptors of one name whose help
// differs, so it must stay exactly this.
const masterStatusHelp = "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name."

// collector reports one Elector's metrics; every value is read when it is scraped.
type collector struct {
	e                                                   *Elector
	master, token, validSeconds, terms, reads, releases *prometheus.Desc
}

// Collector returns a Prometheus collector of this Elector's metrics. It starts no goroutine
// and registers nothing: register it yourself (prometheus.MustRegister, or controller-runtime's
// metrics.Registry). Every value is read at scrape time:
//
//   - leader_election_master_status{name=<Lock>}: 1 while Valid(), else 0. The name, help text
//     and label set are client-go's (as controller-runtime and component-base register them),
//     so dashboards and alerts written for client-go's leader election work unchanged.
//   - lockwarden_leadership_token{namespace, name}: Token(), 0 when not leading.
//   - lockwarden_leadership_valid_seconds{namespace, name}: the time left until ValidUntil(),
//     0 when not leading.
//   - lockwarden_leadership_terms_total{namespace, name}: terms started (led) since New,
//     including any whose callbacks were skipped.
//   - lockwarden_leadership_reads_total{namespace, name, result="ok"|"error"}: consistent reads
//     that completed.
//   - lockwarden_leadership_releases_total{namespace, name, result="released"|"refused"|"unknown"}:
//     release requests by outcome (unknown: a timeout or lost connection; it may have been
//     applied).
//
// namespace and name are Config.Namespace and Config.Lock, fixed per collector, so the
// collectors of Electors of different locks can share one registry.
//
// The collector is unchecked (Describe sends nothing): controller-runtime registers its own
// leader_election_master_status gauge in metrics.Registry at init, and a registry refuses a
// second checked collector describing that name, so a checked one could never share
// controller-runtime's registry. The registry checks the series when it gathers instead: two
// collectors of the same lock in one registry make every gather fail with duplicate series.
//
// Registering it in controller-runtime's metrics.Registry beside a manager that itself runs
// leader election (LeaderElection: true) under the same name makes the registry serve
// leader_election_master_status{name=<Lock>} twice: controller-runtime's own gauge reports
// that name too, and every scrape of the registry then fails with a "collected before with
// the same name and label values" error (controller-runtime's metrics server answers it with
// HTTP 500, so every other series is lost too). In such a process either let the manager's election report that series and
// register this collector in a registry of its own (prometheus.NewRegistry, served on another
// path, for example through the metrics server's ExtraHandlers), or elect only through this
// Elector. Managers electing under other names do not collide.
func (e *Elector) Collector() prometheus.Collector {
	lock := prometheus.Labels{"namespace": e.cfg.Namespace, "name": e.cfg.Lock}
	desc := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, variable, lock)
	}
	return &collector{
		e:      e,
		master: prometheus.NewDesc("leader_election_master_status", masterStatusHelp, nil, prometheus.Labels{"name": e.cfg.Lock}),
		token:  desc("lockwarden_leadership_token", "Fencing token of the term this pod leads, 0 when it does not lead."),
		validSeconds: desc("lockwarden_leadership_valid_seconds",
			"Seconds left in the term this pod leads before its deadline (without a newer confirming read), 0 when it does not lead."),
		terms: desc("lockwarden_leadership_terms_total", "Terms this pod started to lead."),
		reads: desc("lockwarden_leadership_reads_total", "Consistent reads of the DistributedLock that completed, by result (ok, error).", "result"),
		releases: desc("lockwarden_leadership_releases_total",
			"Holder-confirmed release requests, by outcome: released, refused by the API server, or unknown (no answer; it may have been applied).", "result"),
	}
}

// Describe sends nothing: the collector is unchecked (see Elector.Collector), so that it can
// share a registry with controller-runtime's leader_election_master_status gauge.
func (c *collector) Describe(chan<- *prometheus.Desc) {}

// Collect reads the Elector's state now and sends every metric.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	e := c.e
	var master, token, left float64
	if v := e.led.Load(); v != nil {
		if d := v.deadline.Sub(now()); d > 0 {
			master, token, left = 1, float64(v.token), d.Seconds()
		}
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	count := func(d *prometheus.Desc, n *atomic.Int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(n.Load()), labels...)
	}
	gauge(c.master, master)
	gauge(c.token, token)
	gauge(c.validSeconds, left)
	count(c.terms, &e.count.terms)
	count(c.reads, &e.count.readsOK, "ok")
	count(c.reads, &e.count.readsFailed, "error")
	count(c.releases, &e.count.released, "released")
	count(c.releases, &e.count.refused, "refused")
	count(c.releases, &e.count.unknown, "unknown")
}
