package controllers_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestWithoutUpdateOnlyReleaseChanges: any requester the authorizer does not allow to update
// the lock may change nothing but lockwarden.io/holder-release, whoever it is and however it
// got patch: a service account of another namespace bound in the lock's namespace, a user
// bound by a RoleBinding, a group bound by a ClusterRoleBinding. A namespace editor (update)
// may. (Review 2: only service accounts of the lock's own namespace were restricted.)
func TestWithoutUpdateOnlyReleaseChanges(t *testing.T) {
	f := newFixture(t)
	f.releaseSetup()
	f.editorRole("editor")
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "other-"}}
	if err := k8s.Create(bg(), other); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	reader := rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "lockwarden-lock-reader"}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{GenerateName: "review-readers-"}, RoleRef: reader,
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "readers-" + f.ns}}}
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: other.Name}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "intruder-lock-reader", Namespace: f.ns}, RoleRef: reader,
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "intruder", Namespace: other.Name}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "user-lock-reader", Namespace: f.ns}, RoleRef: reader,
			Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "reader"}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "intruder-0", Namespace: other.Name},
			Spec: corev1.PodSpec{ServiceAccountName: "intruder", Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}}},
		crb,
	}
	for _, o := range objs {
		if err := k8s.Create(bg(), o); err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
	}
	t.Cleanup(func() { _ = k8s.Delete(bg(), crb) })
	cfg, err := env.PodConfig(bg(), objs[3].(*corev1.Pod))
	if err != nil {
		t.Fatalf("pod token: %v", err)
	}
	intruder, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	f.workerPod("a-0", "a")
	l := f.lock("lock", "a", nil)
	f.waitFor("lock", 10*time.Second, "held by a-0", heldBy("a-0"))

	for _, tc := range []struct {
		who string
		c   client.Client
	}{
		{"service account of namespace " + other.Name + " (RoleBinding)", intruder},
		{"user reader (RoleBinding)", impersonating(t, "reader")},
		{"group readers-" + f.ns + " (ClusterRoleBinding)", impersonating(t, "someone", "readers-"+f.ns)},
	} {
		for _, patch := range []string{`{"spec":{"suspend":true}}`, `{"metadata":{"labels":{"tier":"x"}}}`} {
			err := rawPatch(tc.c, l, patch)
			switch {
			case err == nil:
				t.Errorf("%s, which may not update the lock, patched %s: admitted", tc.who, patch)
			case !strings.Contains(err.Error(), "may change only the lockwarden.io/holder-release annotation"):
				t.Errorf("%s patching %s: %v, want the policy's refusal", tc.who, patch, err)
			default:
				t.Logf("%s patching %s: refused: %v", tc.who, patch, err)
			}
		}
	}
	if now := f.get("lock"); now.Spec.Suspend || now.Labels["tier"] != "" {
		t.Errorf("lock changed by refused patches: suspend=%v labels=%v", now.Spec.Suspend, now.Labels)
	}
	if err := rawPatch(impersonating(t, "editor"), l, `{"metadata":{"labels":{"tier":"x"}}}`); err != nil {
		t.Errorf("namespace editor (update) patching a label: %v, want admitted", err)
	}
}
