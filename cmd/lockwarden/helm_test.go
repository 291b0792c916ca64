package main

import (
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/lockwarden/lockwarden/internal/testenv"
)

// helmTemplate renders charts/lockwarden with ./bin/helm (make helm) into lockwarden-system,
// with the CRD, and args added.
func helmTemplate(t *testing.T, args ...string) rendered {
	t.Helper()
	out, err := runHelm(t, args...)
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return parseObjects(t, out)
}

func runHelm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	return testenv.HelmTemplate(t.TempDir(), append([]string{"--include-crds", "--set", "createNamespace=true"}, args...)...)
}

// TestHelmChartRendersKustomize compares the chart with kustomize object by object: the
// default values with config/default, values-ha.yaml with config/ha, and the Prometheus
// objects with config/prometheus. The CRD, the cluster-scoped RBAC and policy objects and the
// alert rules are symlinks into config/: an object kustomize renders and the chart does not
// is a new file there that needs its link in charts/lockwarden/files/cluster.
func TestHelmChartRendersKustomize(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	withPrometheus := filepath.Join(t.TempDir(), "with-prometheus")
	if err := os.MkdirAll(withPrometheus, 0o755); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(withPrometheus, filepath.Join(root, "config"))
	if err != nil {
		t.Fatal(err)
	}
	kz := "resources: [" + filepath.Join(rel, "default") + "]\ncomponents: [" + filepath.Join(rel, "prometheus") + "]\n"
	if err := os.WriteFile(filepath.Join(withPrometheus, "kustomization.yaml"), []byte(kz), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		kustomize string
		helmArgs  []string
	}{
		{"default", "config/default", nil},
		{"ha", "config/ha", []string{"-f", filepath.Join(root, "charts", "lockwarden", "values-ha.yaml")}},
		{"prometheus", withPrometheus, []string{"--set", "prometheus.serviceMonitor=true,prometheus.rules=true"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := tt.kustomize
			if filepath.IsAbs(dir) {
				dir, _ = filepath.Rel(root, dir)
			}
			want, got := kustomize(t, dir), helmTemplate(t, tt.helmArgs...)
			normalise(want)
			normalise(got)
			var keys []string
			for k := range want {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				h, ok := got[k]
				if !ok {
					t.Errorf("%s: kustomize renders it, the chart does not (a new file in config/rbac or config/policy needs a symlink in charts/lockwarden/files/cluster)", k)
					continue
				}
				if !equalObjects(want[k], h) {
					t.Errorf("%s differs (kustomize -, helm +):\n%s", k, firstDiff(t, want[k].Object, h.Object))
				}
			}
			for k := range got {
				if _, ok := want[k]; !ok {
					t.Errorf("%s: the chart renders it, kustomize does not", k)
				}
			}
			if len(want) < 10 {
				t.Errorf("kustomize rendered only %d objects: %v", len(want), keys)
			}
		})
	}
}

// clusterScoped are the cluster-scoped kinds the renders hold. kustomize's namespace
// transformer does not know that the Validating and MutatingAdmissionPolicy(Binding) kinds
// are among them and sets metadata.namespace on them; the API server ignores a namespace on a
// cluster-scoped object.
var clusterScoped = map[string]bool{
	"Namespace": true, "CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
	"MutatingAdmissionPolicy": true, "MutatingAdmissionPolicyBinding": true,
}

// normalise drops what differs between the two renders without meaning anything: the
// namespace of a cluster-scoped object, and the line breaks of multi-line strings. kustomize
// (go-yaml v3) and Helm (which prints the file as it is, parsed here by sigs.k8s.io/yaml)
// disagree on a folded scalar (>-) with more-indented lines, such as config/policy's CEL
// expressions: v3 keeps one more line break. Only strings with a line break are touched;
// their runs of white space become one space.
func normalise(r rendered) {
	for _, u := range r {
		if clusterScoped[u.GetKind()] {
			u.SetNamespace("")
		}
		u.Object = normaliseValue(u.Object).(map[string]any)
	}
}

func normaliseValue(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = normaliseValue(e)
		}
	case []any:
		for i, e := range v {
			v[i] = normaliseValue(e)
		}
	case string:
		if strings.Contains(v, "\n") {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return v
}

func TestHelmChartRefusesBadValues(t *testing.T) {
	for _, tt := range []struct {
		set, want string
	}{
		{"mode=cluster", `mode "cluster": want embedded or ha`},
		{"mode=ha,ha.replicas=1", "ha.replicas 1: want 2 or more"},
		{"mode=ha,ha.endpoints={https://a:2379}", "ha.endpoints: want the 3 or 5 members"},
	} {
		out, err := runHelm(t, "--set", tt.set)
		if err == nil || !strings.Contains(string(out), tt.want) {
			t.Errorf("helm template --set %s = %v, %q; want a failure saying %q", tt.set, err, out, tt.want)
		}
	}
}

// firstDiff shows the first lines where the YAML of a and b differ, with context.
func firstDiff(t *testing.T, a, b map[string]any) string {
	t.Helper()
	ya, err1 := yaml.Marshal(a)
	yb, err2 := yaml.Marshal(b)
	if err1 != nil || err2 != nil {
		t.Fatalf("marshal: %v, %v", err1, err2)
	}
	la, lb := strings.Split(string(ya), "\n"), strings.Split(string(yb), "\n")
	i := 0
	for i < len(la) && i < len(lb) && la[i] == lb[i] {
		i++
	}
	from := max(0, i-3)
	var out []string
	for j := from; j < i; j++ {
		out = append(out, "  "+la[j])
	}
	for j := i; j < min(len(la), i+4); j++ {
		out = append(out, "- "+la[j])
	}
	for j := i; j < min(len(lb), i+4); j++ {
		out = append(out, "+ "+lb[j])
	}
	return strings.Join(out, "\n")
}

// TestHelmWatchNamespaces: the value watchNamespaces runs the manager with
// --watch-namespaces and scopes the finalizer policy's binding to the same namespaces, so a
// lock in another namespace gets no finalizer that no manager would remove (the manager
// refuses to start otherwise: controllers.CheckFinalizerScope).
func TestHelmWatchNamespaces(t *testing.T) {
	r := helmTemplate(t, "--set", "watchNamespaces={team-a,team-b}")
	var d appsv1.Deployment
	r.into(t, "Deployment/lockwarden-manager", &d)
	o, err := parseFlags(d.Spec.Template.Spec.Containers[0].Args, io.Discard)
	if err != nil {
		t.Fatalf("the manager rejects the chart's args: %v", err)
	}
	if want := []string{"team-a", "team-b"}; !slices.Equal(o.namespaces, want) {
		t.Errorf("--watch-namespaces = %v, want %v", o.namespaces, want)
	}
	var b admissionv1.MutatingAdmissionPolicyBinding
	r.into(t, "MutatingAdmissionPolicyBinding/lockwarden-finalizer", &b)
	want := &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpIn, Values: []string{"team-a", "team-b"}}}}}
	if b.Spec.PolicyName != "lockwarden-finalizer" || !reflect.DeepEqual(b.Spec.MatchResources, want) {
		t.Errorf("binding spec = %+v, want policy lockwarden-finalizer with matchResources %+v", b.Spec, want)
	}
}

// TestHelmGlobal: the values global.clusterName and etcdPrefix run the manager with
// --cluster-name, --global-etcd-prefix and --etcd-prefix (each cluster on its own prefix of
// the shared etcd), and the defaults add none of them.
func TestHelmGlobal(t *testing.T) {
	args := func(t *testing.T, set ...string) []string {
		t.Helper()
		var d appsv1.Deployment
		helmTemplate(t, set...).into(t, "Deployment/lockwarden-manager", &d)
		return d.Spec.Template.Spec.Containers[0].Args
	}
	def := args(t)
	for _, a := range def {
		if strings.HasPrefix(a, "--cluster-name") || strings.HasPrefix(a, "--global-etcd-prefix") || strings.HasPrefix(a, "--etcd-prefix") {
			t.Errorf("default values render %q", a)
		}
	}
	got := args(t, "--set", "global.clusterName=east", "--set", "etcdPrefix=/lockwarden/east")
	o, err := parseFlags(got, io.Discard)
	if err != nil {
		t.Fatalf("the manager rejects the chart's args %q: %v", got, err)
	}
	if o.clusterName != "east" || o.globalEtcdPrefix != "/lockwarden-global" || o.etcdPrefix != "/lockwarden/east" {
		t.Errorf("--cluster-name %q --global-etcd-prefix %q --etcd-prefix %q, want east, /lockwarden-global, /lockwarden/east", o.clusterName, o.globalEtcdPrefix, o.etcdPrefix)
	}
}
