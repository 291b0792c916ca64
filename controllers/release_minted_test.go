package controllers_test

import (
	"fmt"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestMintedHolderTokenIsHolderIdentity shows the documented limit of the admission policy
// (config/policy, docs/operations.md "Holder-confirmed release: who may release"): an identity
// that may only create tokens for the worker service account (serviceaccounts/token) mints
// one bound to the holder pod, and its release is admitted like the holder's own: the term
// ends without the lock delay while the holder pod keeps running Ready. The API server cannot
// tell such a token from the pod's, so releasing is exactly as strong as the right to mint
// tokens for the holder's service account. If this test fails, the policy learnt to tell
// them apart: update the documentation.
func TestMintedHolderTokenIsHolderIdentity(t *testing.T) {
	f := newFixture(t)
	f.releaseSetup()
	a0, _ := f.workerPod("a-0", "a")
	f.workerPod("a-1", "a")
	l := f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = new(int32(30)) })
	held := f.waitFor("lock", 10*time.Second, "held by a-0", heldBy("a-0"))

	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "minter", Namespace: f.ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "mint-worker", Namespace: f.ns}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}, ResourceNames: []string{"worker"},
		}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "minter", Namespace: f.ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "mint-worker"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "minter", Namespace: f.ns}}},
	}
	for _, o := range objs {
		if err := k8s.Create(bg(), o); err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
	}
	admin, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	mt, err := admin.CoreV1().ServiceAccounts(f.ns).CreateToken(bg(), "minter", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("minter token: %v", err)
	}
	mcfg := rest.AnonymousClientConfig(env.Config)
	mcfg.BearerToken = mt.Status.Token
	minter, err := kubernetes.NewForConfig(mcfg)
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	var tr *authenticationv1.TokenRequest
	eventually(t, 10*time.Second, func() bool {
		tr, err = minter.CoreV1().ServiceAccounts(f.ns).CreateToken(bg(), "worker", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: a0.Name, UID: a0.UID},
		}}, metav1.CreateOptions{})
		return err == nil
	}, func() string { return fmt.Sprintf("mint: %v", err) })
	fcfg := rest.AnonymousClientConfig(env.Config)
	fcfg.BearerToken = tr.Status.Token
	forged, err := client.New(fcfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	if err := setAnnotation(forged, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(a0.UID, held.Status.FencingToken)); err != nil {
		t.Fatalf("release with a minted token bound to the holder pod refused (%v): the documented limit no longer holds, update docs/operations.md and the policy's comments", err)
	}
	begin := time.Now()
	next := f.waitFor("lock", 20*time.Second, "held by a-1", heldBy("a-1"))
	if took := time.Since(begin); took >= 30*time.Second {
		t.Errorf("a-1 granted %v after the minted release, want less than the 30 s lock delay (the release counted as the holder's)", took)
	}
	var p corev1.Pod
	if err := k8s.Get(bg(), client.ObjectKeyFromObject(a0), &p); err != nil {
		t.Fatalf("get pod a-0: %v", err)
	}
	t.Logf("a release minted by service account minter (create serviceaccounts/token only) was admitted: a-1 holds token %d while a-0 is %s, as documented",
		next.Status.FencingToken, p.Status.Phase)
}

// TestImpersonatedPodUIDIsHolderIdentity: an identity allowed to impersonate the worker
// service account with the user extra authentication.kubernetes.io/pod-uid (here the
// administrator) presents the holder pod's identity, and its release is admitted: the same
// documented limit as a minted token.
func TestImpersonatedPodUIDIsHolderIdentity(t *testing.T) {
	f := newFixture(t)
	f.releaseSetup()
	a0, _ := f.workerPod("a-0", "a")
	f.workerPod("a-1", "a")
	l := f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = new(int32(30)) })
	held := f.waitFor("lock", 10*time.Second, "held by a-0", heldBy("a-0"))
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + f.ns + ":worker",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + f.ns, "system:authenticated"},
		Extra:    map[string][]string{"authentication.kubernetes.io/pod-uid": {string(a0.UID)}},
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	if err := setAnnotation(c, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(a0.UID, held.Status.FencingToken)); err != nil {
		t.Fatalf("release impersonating the holder pod refused (%v): the documented limit no longer holds, update docs/operations.md and the policy's comments", err)
	}
	begin := time.Now()
	f.waitFor("lock", 20*time.Second, "held by a-1", heldBy("a-1"))
	if took := time.Since(begin); took >= 30*time.Second {
		t.Errorf("a-1 granted %v after the impersonated release, want less than the 30 s lock delay", took)
	}
}
