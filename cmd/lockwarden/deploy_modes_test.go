package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/lockwarden/lockwarden/internal/testenv"
)

// rendered is one kustomize build, by "Kind/name".
type rendered map[string]*unstructured.Unstructured

// kustomize renders dir (relative to the repository root) with ./bin/kubectl kustomize.
func kustomize(t *testing.T, dir string) rendered {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kubectl := filepath.Join(root, "bin", "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		t.Fatalf("%s not found: run `make envtest-bins`", kubectl)
	}
	out, err := exec.Command(kubectl, "kustomize", filepath.Join(root, dir)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	return parseObjects(t, out)
}

// parseObjects splits a multi-document YAML stream into objects by "Kind/name".
func parseObjects(t *testing.T, stream []byte) rendered {
	t.Helper()
	objs := rendered{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(stream), 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return objs
		} else if err != nil {
			t.Fatalf("decode rendered YAML: %v", err)
		}
		if len(u.Object) == 0 {
			continue
		}
		key := u.GetKind() + "/" + u.GetName()
		if _, dup := objs[key]; dup {
			t.Fatalf("%s rendered twice", key)
		}
		objs[key] = &u
	}
}

// into converts the object key of r into out, failing when it is missing.
func (r rendered) into(t *testing.T, key string, out any) {
	t.Helper()
	u, ok := r[key]
	if !ok {
		t.Fatalf("no %s in the render", key)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		t.Fatalf("convert %s: %v", key, err)
	}
}

// TestDefaultIsOneReplicaWithEmbeddedEtcd checks config/default: one replica, Recreate, the
// embedded etcd's data dir on the PersistentVolumeClaim, loopback only, no PDB, and flags
// the binary itself accepts.
func TestDefaultIsOneReplicaWithEmbeddedEtcd(t *testing.T) {
	r := kustomize(t, "config/default")
	var d appsv1.Deployment
	r.into(t, "Deployment/lockwarden-manager", &d)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("replicas = %v, want 1: two processes must never share one embedded etcd", d.Spec.Replicas)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || d.Spec.Strategy.RollingUpdate != nil {
		t.Errorf("strategy = %+v, want Recreate (the old pod stops before the new one opens the data dir)", d.Spec.Strategy)
	}
	c := d.Spec.Template.Spec.Containers[0]
	o, err := parseFlags(c.Args, io.Discard)
	if err != nil {
		t.Fatalf("the manager rejects config/default's args %q: %v", c.Args, err)
	}
	if o.embeddedEtcdDir == "" || len(o.etcdEndpoints) > 0 {
		t.Fatalf("args %q: want --embedded-etcd-dir and no --etcd-endpoints", c.Args)
	}
	if err := checkLoopback(o.embeddedEtcdListen); err != nil {
		t.Errorf("--embedded-etcd-listen: %v", err)
	}
	var claim string
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(o.embeddedEtcdDir, m.MountPath+"/") && !m.ReadOnly {
			for _, v := range d.Spec.Template.Spec.Volumes {
				if v.Name == m.Name && v.PersistentVolumeClaim != nil {
					claim = v.PersistentVolumeClaim.ClaimName
				}
			}
		}
	}
	if claim == "" {
		t.Fatalf("--embedded-etcd-dir=%s is not under a writable PersistentVolumeClaim mount (mounts %+v)", o.embeddedEtcdDir, c.VolumeMounts)
	}
	var pvc corev1.PersistentVolumeClaim
	r.into(t, "PersistentVolumeClaim/"+claim, &pvc)
	if pvc.Namespace != "lockwarden-system" || !slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteOnce) {
		t.Errorf("claim %s: namespace %q, access modes %v; want lockwarden-system, ReadWriteOnce", claim, pvc.Namespace, pvc.Spec.AccessModes)
	}
	if sc := d.Spec.Template.Spec.SecurityContext; sc == nil || sc.FSGroup == nil || sc.RunAsUser == nil || *sc.FSGroup != *sc.RunAsUser {
		t.Errorf("pod securityContext %+v: want fsGroup = runAsUser, so the volume is writable by the non-root user", sc)
	}
	for key := range r {
		if strings.HasPrefix(key, "PodDisruptionBudget/") {
			t.Errorf("config/default renders %s: a PDB over one replica blocks every drain", key)
		}
	}
	if _, ok := r["Service/lockwarden-manager-metrics"]; !ok {
		t.Error("no metrics Service in config/default")
	}
}

// TestHAIsTwoReplicasOnExternalEtcd checks config/ha: two replicas rolling with no
// unavailability, a PDB that lets one go, TLS flags for the Secret's files.
func TestHAIsTwoReplicasOnExternalEtcd(t *testing.T) {
	r := kustomize(t, "config/ha")
	var d appsv1.Deployment
	r.into(t, "Deployment/lockwarden-manager", &d)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Fatalf("replicas = %v, want 2", d.Spec.Replicas)
	}
	if ru := d.Spec.Strategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.IntValue() != 0 {
		t.Errorf("strategy = %+v, want a rolling update with maxUnavailable 0", d.Spec.Strategy)
	}
	var pdb policyv1.PodDisruptionBudget
	r.into(t, "PodDisruptionBudget/lockwarden-manager", &pdb)
	if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PDB minAvailable = %v, want 1 (of 2: a drain may move one at a time)", pdb.Spec.MinAvailable)
	}
	for k, v := range pdb.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("PDB selector %v does not select the manager's pods (labels %v)", pdb.Spec.Selector.MatchLabels, d.Spec.Template.Labels)
		}
	}
	// The flags, with the Secret's files where the manifest mounts them.
	c := d.Spec.Template.Spec.Containers[0]
	var mount string
	for _, m := range c.VolumeMounts {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "lockwarden-etcd-client" {
				mount = m.MountPath
			}
		}
	}
	if mount == "" {
		t.Fatalf("no mount of the Secret lockwarden-etcd-client in %+v", c.VolumeMounts)
	}
	dir := t.TempDir()
	var args []string
	for _, a := range c.Args {
		args = append(args, strings.ReplaceAll(a, mount, dir))
	}
	for _, f := range []string{"ca.crt", "tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	o, err := parseFlags(args, io.Discard)
	if err != nil {
		t.Fatalf("the manager rejects config/ha's args %q: %v", c.Args, err)
	}
	if len(o.etcdEndpoints) < 3 || o.etcdCA == "" || o.etcdCert == "" || o.embeddedEtcdDir != "" {
		t.Errorf("args %q: want 3 or more endpoints, CA, client certificate, no embedded etcd", c.Args)
	}
}

// TestModesDifferOnlyInEtcd checks that config/default and config/ha are the same install
// apart from where etcd is: the objects both render are equal but for the Deployment.
func TestModesDifferOnlyInEtcd(t *testing.T) {
	def, ha := kustomize(t, "config/default"), kustomize(t, "config/ha")
	only := map[string]bool{"PersistentVolumeClaim/lockwarden-etcd-data": true, "PodDisruptionBudget/lockwarden-manager": true}
	for key, u := range def {
		h, ok := ha[key]
		switch {
		case !ok && !only[key]:
			t.Errorf("%s is in config/default only", key)
		case ok && key != "Deployment/lockwarden-manager" && !equalObjects(u, h):
			t.Errorf("%s differs between config/default and config/ha", key)
		}
	}
	for key := range ha {
		if _, ok := def[key]; !ok && !only[key] {
			t.Errorf("%s is in config/ha only", key)
		}
	}
}

func equalObjects(a, b *unstructured.Unstructured) bool {
	ja, err1 := a.MarshalJSON()
	jb, err2 := b.MarshalJSON()
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}
