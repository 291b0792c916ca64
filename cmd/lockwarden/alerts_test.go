package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/lockwarden/lockwarden/controllers"
	"github.com/lockwarden/lockwarden/internal/testenv"
)

// ruleFile is the part of a Prometheus rule file the test reads.
type ruleFile struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Alert string `json:"alert"`
			Expr  string `json:"expr"`
		} `json:"rules"`
	} `json:"groups"`
}

// TestAlertRulesUseExportedMetrics checks config/prometheus: the PrometheusRule holds exactly
// the groups of the plain rule file, the alerts the docs promise are there, and every
// lockwarden_ metric an expression names is one the manager registers.
func TestAlertRulesUseExportedMetrics(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string, into any) {
		b, err := os.ReadFile(filepath.Join(root, "config", "prometheus", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, into); err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
	}
	var plain ruleFile
	var crd struct {
		Kind string   `json:"kind"`
		Spec ruleFile `json:"spec"`
	}
	read("lockwarden.rules.yaml", &plain)
	read("prometheusrule.yaml", &crd)
	var plainAny, crdAny struct {
		Spec any `json:"spec"`
	}
	read("prometheusrule.yaml", &crdAny)
	read("lockwarden.rules.yaml", &plainAny.Spec)
	if crd.Kind != "PrometheusRule" || !reflect.DeepEqual(plainAny.Spec, crdAny.Spec) {
		t.Errorf("prometheusrule.yaml (kind %q) and lockwarden.rules.yaml hold different rules", crd.Kind)
	}

	exported := map[string]bool{}
	rec := &recordingRegisterer{names: exported}
	controllers.NewMetrics(rec)
	if len(exported) == 0 {
		t.Fatal("controllers.NewMetrics registered no metric")
	}
	want := map[string]bool{"LockwardenTokenRegression": false, "LockwardenLockWithoutHolder": false, "LockwardenEtcdUnavailable": false}
	metric := regexp.MustCompile(`lockwarden_[a-z_]+`)
	for _, g := range plain.Groups {
		for _, r := range g.Rules {
			if _, ok := want[r.Alert]; ok {
				want[r.Alert] = true
			}
			names := metric.FindAllString(r.Expr, -1)
			if len(names) == 0 {
				t.Errorf("alert %s: expression %q names no lockwarden metric", r.Alert, r.Expr)
			}
			for _, n := range names {
				if !exported[n] {
					t.Errorf("alert %s uses %s, which the manager does not export (it exports %v)", r.Alert, n, exported)
				}
			}
		}
	}
	for a, found := range want {
		if !found {
			t.Errorf("no alert %s in lockwarden.rules.yaml", a)
		}
	}
}

// recordingRegisterer records the names of the metrics registered with it.
type recordingRegisterer struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return nil
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *recordingRegisterer) Unregister(prometheus.Collector) bool { return false }
