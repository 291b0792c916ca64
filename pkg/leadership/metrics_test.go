package leadership_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// zeroMetrics is the exposition of an Elector of lock ns/leader before Run.
func zeroMetrics(ns string) string {
	return strings.ReplaceAll(`# HELP leader_election_master_status Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make sure to group by name.
# TYPE leader_election_master_status gauge
leader_election_master_status{name="leader"} 0
# HELP lockwarden_leadership_token Fencing token of the term this pod leads, 0 when it does not lead.
# TYPE lockwarden_leadership_token gauge
lockwarden_leadership_token{name="leader",namespace="NS"} 0
# HELP lockwarden_leadership_valid_seconds Seconds left in the term this pod leads before its deadline (without a newer confirming read), 0 when it does not lead.
# TYPE lockwarden_leadership_valid_seconds gauge
lockwarden_leadership_valid_seconds{name="leader",namespace="NS"} 0
# HELP lockwarden_leadership_terms_total Terms this pod started to lead.
# TYPE lockwarden_leadership_terms_total counter
lockwarden_leadership_terms_total{name="leader",namespace="NS"} 0
# HELP lockwarden_leadership_reads_total Consistent reads of the DistributedLock that completed, by result (ok, error).
# TYPE lockwarden_leadership_reads_total counter
lockwarden_leadership_reads_total{name="leader",namespace="NS",result="error"} 0
lockwarden_leadership_reads_total{name="leader",namespace="NS",result="ok"} 0
# HELP lockwarden_leadership_releases_total Holder-confirmed release requests, by outcome: released, refused by the API server, or unknown (no answer; it may have been applied).
# TYPE lockwarden_leadership_releases_total counter
lockwarden_leadership_releases_total{name="leader",namespace="NS",result="refused"} 0
lockwarden_leadership_releases_total{name="leader",namespace="NS",result="released"} 0
lockwarden_leadership_releases_total{name="leader",namespace="NS",result="unknown"} 0
`, "NS", ns)
}

// scrape gathers reg and returns the value of the series of name whose labels include want.
func scrape(t *testing.T, reg prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metrics
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s%v", name, want)
	return 0
}

// TestCollector scrapes a real elector (with the pod's own token, through a proxy) through a
// grant, a release, a release without an answer and refused reads, and a second elector of
// another lock in the same registry whose release the API server refuses.
func TestCollector(t *testing.T) {
	ns := namespace(t)
	key := createLock(t, ns, "leader", 6)
	pod, podCfg := podIdentity(t, ns)
	waitPolicy(t, key)
	p, err := apiproxy.Start(podCfg, apiproxy.Options{})
	if err != nil {
		t.Fatalf("start proxy: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("close proxy: %v", err)
		}
	})
	el, err := leadership.New(leadership.Config{Config: p.Config(), Namespace: ns, Lock: key.Name, Identity: pod.UID,
		ReleaseTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(el.Collector())
	if err := testutil.GatherAndCompare(reg, strings.NewReader(zeroMetrics(ns))); err != nil {
		t.Errorf("before Run: %v", err)
	}
	// Unchecked: a second collector of the same lock registers, and gathering then fails.
	twice := prometheus.NewRegistry()
	twice.MustRegister(el.Collector(), el.Collector())
	if _, err := twice.Gather(); err == nil || !strings.Contains(err.Error(), "collected before with the same name and label values") {
		t.Errorf("Gather with two collectors of one lock = %v, want a duplicate series error", err)
	}

	lock := map[string]string{"namespace": ns, "name": "leader"}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for k, v := range lock {
			m[k] = v
		}
		return m
	}
	value := func(name string, labels map[string]string) float64 { return scrape(t, reg, name, labels) }
	waitValue := func(what string, cond func() bool) {
		t.Helper()
		eventually(t, 10*time.Second, cond, func() string { return what })
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	defer func() {
		cancel()
		p.SetMode(apiproxy.Pass)
		if err := <-done; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	}()

	waitValue("no successful read counted", func() bool { return value("lockwarden_leadership_reads_total", with("result", "ok")) >= 1 })
	if m := value("leader_election_master_status", map[string]string{"name": "leader"}); m != 0 {
		t.Errorf("leader_election_master_status before a grant = %v, want 0", m)
	}

	setStatus(t, key, held(pod.Name, pod.UID, 40, 6))
	eventually(t, 10*time.Second, el.Valid, func() string { return "the pod never led token 40" })
	if m, tok, terms := value("leader_election_master_status", map[string]string{"name": "leader"}),
		value("lockwarden_leadership_token", lock), value("lockwarden_leadership_terms_total", lock); m != 1 || tok != 40 || terms != 1 {
		t.Errorf("leading token 40: master_status %v, token %v, terms_total %v; want 1, 40, 1", m, tok, terms)
	}
	if left, want := value("lockwarden_leadership_valid_seconds", lock), time.Until(el.ValidUntil()).Seconds(); left <= 0 || left > 6 || left < want-0.5 {
		t.Errorf("leading: valid_seconds %v, want in (0, 6] and about ValidUntil() - now = %v", left, want)
	}

	if err := el.Release(t.Context()); err != nil {
		t.Fatalf("Release = %v, want nil", err)
	}
	if m, tok, left, rel := value("leader_election_master_status", map[string]string{"name": "leader"}), value("lockwarden_leadership_token", lock),
		value("lockwarden_leadership_valid_seconds", lock), value("lockwarden_leadership_releases_total", with("result", "released")); m != 0 || tok != 0 || left != 0 || rel != 1 {
		t.Errorf("after Release: master_status %v, token %v, valid_seconds %v, releases{released} %v; want 0, 0, 0, 1", m, tok, left, rel)
	}

	setStatus(t, key, held(pod.Name, pod.UID, 41, 6))
	eventually(t, 10*time.Second, el.Valid, func() string { return "the pod never led token 41" })
	p.SetMode(apiproxy.Hold)
	if err := el.Release(t.Context()); err == nil {
		t.Fatalf("Release through a holding proxy = nil, want a timeout")
	}
	if unk, terms := value("lockwarden_leadership_releases_total", with("result", "unknown")), value("lockwarden_leadership_terms_total", lock); unk != 1 || terms != 2 {
		t.Errorf("after a release without an answer: releases{unknown} %v, terms_total %v; want 1, 2", unk, terms)
	}
	p.SetMode(apiproxy.Refuse)
	waitValue("no failed read counted with every request refused", func() bool {
		return value("lockwarden_leadership_reads_total", with("result", "error")) >= 1
	})
	p.SetMode(apiproxy.Pass)

	// Another lock's elector in the same registry, with an administrator's credentials: the
	// policy refuses its release.
	other := createLock(t, ns, "other", 6)
	setStatus(t, other, held("worker-x", "uid-x", 50, 6))
	el2, err := leadership.New(leadership.Config{Config: env.Config, Namespace: ns, Lock: other.Name, Identity: "uid-x"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	reg.MustRegister(el2.Collector())
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan error, 1)
	go func() { done2 <- el2.Run(ctx2) }()
	defer func() {
		cancel2()
		if err := <-done2; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	}()
	eventually(t, 10*time.Second, el2.Valid, func() string { return "the second elector never led token 50" })
	if m, own := value("leader_election_master_status", map[string]string{"name": "other"}),
		value("leader_election_master_status", map[string]string{"name": "leader"}); m != 1 || own != 0 {
		t.Errorf("leader_election_master_status: %v for other, %v for leader; want 1, 0", m, own)
	}
	if n, err := testutil.GatherAndCount(reg, "leader_election_master_status"); err != nil || n != 2 {
		t.Errorf("series of leader_election_master_status = %d (%v), want 2 (one per lock)", n, err)
	}
	if err := el2.Release(t.Context()); err == nil {
		t.Fatalf("Release with an administrator's token = nil, want the policy's refusal")
	}
	otherLock := map[string]string{"namespace": ns, "name": "other", "result": "refused"}
	if ref, ownRef := value("lockwarden_leadership_releases_total", otherLock), value("lockwarden_leadership_releases_total", with("result", "refused")); ref != 1 || ownRef != 0 {
		t.Errorf("releases{refused}: %v for lock other, %v for lock leader; want 1, 0", ref, ownRef)
	}
}

// TestCollectorBesideControllerRuntimeElection shows what Collector's doc warns of: the
// collector registers in controller-runtime's metrics.Registry (its help text and labels
// agree with controller-runtime's leader_election_master_status), and the registry gathers
// until a client-go election under the same name, as a manager with LeaderElection: true runs
// it, reports that series too; from then on every gather fails.
func TestCollectorBesideControllerRuntimeElection(t *testing.T) {
	ns := namespace(t)
	el, err := leadership.New(leadership.Config{Config: env.Config, Namespace: ns, Lock: "leader", Identity: "uid-a"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c := el.Collector()
	if err := metrics.Registry.Register(c); err != nil {
		t.Fatalf("register in controller-runtime's metrics.Registry: %v, want nil", err)
	}
	defer metrics.Registry.Unregister(c)
	if _, err := metrics.Registry.Gather(); err != nil {
		t.Fatalf("Gather before a client-go election: %v, want nil", err)
	}

	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	lock := &resourcelock.LeaseLock{LeaseMeta: metav1.ObjectMeta{Namespace: ns, Name: "leader"}, Client: cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: "manager-0"}}
	ctx, cancel := context.WithCancel(context.Background())
	leading, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock: lock, Name: "leader", LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) { close(leading); <-ctx.Done() },
				OnStoppedLeading: func() {},
			},
		})
	}()
	defer func() { cancel(); <-done }()
	select {
	case <-leading:
	case <-time.After(10 * time.Second):
		t.Fatalf("the client-go election did not lead within 10s")
	}
	_, err = metrics.Registry.Gather()
	if err == nil || !strings.Contains(err.Error(), "leader_election_master_status") || !strings.Contains(err.Error(), "collected before with the same name and label values") {
		t.Errorf("Gather beside a client-go election of the same name = %v, want a duplicate leader_election_master_status error", err)
	}
}

// ExampleElector_Collector registers an Elector's metrics and reads them (before Run, so
// every value is 0). In a controller-runtime program register it in metrics.Registry,
// unless the manager itself elects under the same name (see Collector).
func ExampleElector_Collector() {
	el, err := leadership.New(leadership.Config{Config: &rest.Config{Host: "https://127.0.0.1:6443"},
		Namespace: "shop", Lock: "payments-leader", Identity: "1f0c7a52-0000-4000-8000-000000000001"})
	if err != nil {
		fmt.Println(err)
		return
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(el.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, mf := range mfs {
		fmt.Println(mf.GetName(), len(mf.GetMetric()))
	}
	// Output:
	// leader_election_master_status 1
	// lockwarden_leadership_reads_total 2
	// lockwarden_leadership_releases_total 3
	// lockwarden_leadership_terms_total 1
	// lockwarden_leadership_token 1
	// lockwarden_leadership_valid_seconds 1
}
