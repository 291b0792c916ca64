package controllers_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/controllers"
)

// Who may change a DistributedLock through the shipped admission policy (config/policy),
// beyond the holder's own release (release_test.go): found by review 2 of issue 13 §1.

// impersonating returns a client acting as user (in groups), through the administrator's
// right to impersonate.
func impersonating(t *testing.T, user string, groups ...string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:authenticated")}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("client for %s: %v", user, err)
	}
	return c
}

// editorRole creates, in the fixture's namespace, a Role that may update and patch
// distributedlocks (what the aggregated edit role grants) bound to user.
func (f *fixture) editorRole(user string) {
	f.t.Helper()
	objs := []client.Object{
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "lock-editor", Namespace: f.ns}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"lockwarden.io"}, Resources: []string{"distributedlocks"}, Verbs: []string{"get", "list", "watch", "update", "patch"},
		}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "lock-editor", Namespace: f.ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "lock-editor"},
			Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}},
	}
	for _, o := range objs {
		if err := k8s.Create(bg(), o); err != nil {
			f.t.Fatalf("create %T: %v", o, err)
		}
	}
}

// rawPatch sends a JSON merge patch to the lock l as c.
func rawPatch(c client.Client, l *lockv1.DistributedLock, patch string) error {
	obj := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.Name}}
	return c.Patch(bg(), obj, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// TestOnlyHolderRemovesItsCurrentRelease: the holder's release is admitted while the
// controller is down; nobody else, neither another candidate pod (through the reader role's
// patch) nor a namespace editor (update), may remove or change it while it names the current
// term, so the controller still finds it and hands over without the lock delay. Once the term
// has ended the stale annotation may be removed. (Review 2: a candidate removed it, and the
// term stayed Held by a pod that does not lead it.)
func TestOnlyHolderRemovesItsCurrentRelease(t *testing.T) {
	f := newFixture(t)
	f.releaseSetup()
	f.editorRole("editor")
	editor := impersonating(t, "editor")
	a0, c0 := f.workerPod("a-0", "a")
	_, c1 := f.workerPod("a-1", "a")
	l := f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = new(int32(30)) })
	held := f.waitFor("lock", 10*time.Second, "held by a-0", heldBy("a-0"))
	f.stop()
	value := lockv1.HolderReleaseValue(a0.UID, held.Status.FencingToken)
	if err := setAnnotation(c0, l, lockv1.AnnotationHolderRelease, value); err != nil {
		t.Fatalf("holder's own release refused: %v", err)
	}
	remove := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, lockv1.AnnotationHolderRelease)
	for _, tc := range []struct {
		who   string
		c     client.Client
		patch string
	}{
		{"candidate a-1, removing", c1, remove},
		{"candidate a-1, changing to an empty value", c1, fmt.Sprintf(`{"metadata":{"annotations":{%q:""}}}`, lockv1.AnnotationHolderRelease)},
		{"namespace editor, removing", editor, remove},
		{"administrator, removing", k8s, remove},
	} {
		err := rawPatch(tc.c, l, tc.patch)
		switch {
		case err == nil:
			t.Errorf("%s: admitted; the holder's release of its current term must stay", tc.who)
		case !strings.Contains(err.Error(), "only the holder pod may remove or change it"):
			t.Errorf("%s: refused with %q, want the policy's message about the current term", tc.who, err)
		default:
			t.Logf("%s: refused: %v", tc.who, err)
		}
	}
	if got := f.get("lock").Annotations[lockv1.AnnotationHolderRelease]; got != value {
		t.Fatalf("holder-release %q after the refused patches, want %q", got, value)
	}

	begin := time.Now()
	f.stop = f.startController("replica-b", 3*time.Second)
	next := f.waitFor("lock", 20*time.Second, "held by a-1", heldBy("a-1"))
	if took := time.Since(begin); took >= 30*time.Second {
		t.Errorf("a-1 granted %v after the controller started, want less than the 30 s lock delay", took)
	}
	// The annotation now names an ended term: an editor may remove it (the manager's and
	// editors' updates pass), and the manager's finalizer is still there.
	if err := rawPatch(editor, l, remove); err != nil {
		t.Errorf("editor removing the release of the ended term %d (a-1 holds %d): %v", held.Status.FencingToken, next.Status.FencingToken, err)
	}
	if fin := f.get("lock").Finalizers; !slices.Contains(fin, controllers.Finalizer) {
		t.Errorf("finalizers %v, want %s", fin, controllers.Finalizer)
	}
}

// TestHolderMayWithdrawItsRelease: the holder pod itself may remove its own release of the
// current term (nobody else may).
func TestHolderMayWithdrawItsRelease(t *testing.T) {
	f := newFixture(t)
	f.releaseSetup()
	a0, c0 := f.workerPod("a-0", "a")
	f.workerPod("a-1", "a")
	l := f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = new(int32(30)) })
	held := f.waitFor("lock", 10*time.Second, "held by a-0", heldBy("a-0"))
	f.stop()
	if err := setAnnotation(c0, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(a0.UID, held.Status.FencingToken)); err != nil {
		t.Fatalf("holder's own release refused: %v", err)
	}
	if err := rawPatch(c0, l, fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, lockv1.AnnotationHolderRelease)); err != nil {
		t.Errorf("the holder removing its own release: %v, want admitted", err)
	}
}
