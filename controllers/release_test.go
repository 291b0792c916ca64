package controllers_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// The release annotations end to end: the API server's admission policy (config/policy, as
// shipped) with real pod-bound service-account tokens, and the controller's rows.

var installPolicy sync.Once

// releaseSetup installs the lock-reader ClusterRole and the admission policy (once per
// process), a service account "worker" bound to lockwarden-lock-reader in the fixture's
// namespace, and waits until the API server enforces the policy.
func (f *fixture) releaseSetup() {
	f.t.Helper()
	var err error
	installPolicy.Do(func() { err = env.Apply(bg(), k8s, "config/rbac/lock_reader_role.yaml", "config/policy") })
	if err != nil {
		f.t.Fatalf("install policy: %v", err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: f.ns}}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-lock-reader", Namespace: f.ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "lockwarden-lock-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "worker", Namespace: f.ns}},
	}
	for _, o := range []client.Object{sa, rb} {
		if err := k8s.Create(bg(), o); err != nil {
			f.t.Fatalf("create %T: %v", o, err)
		}
	}
	// The policy is enforced once the API server's admission informers have it: until then an
	// administrator's release of a lock with no holder would be admitted.
	probe := f.lock("policy-probe", "nothing", nil)
	var last error
	n := 0
	eventually(f.t, 20*time.Second, func() bool {
		n++ // a new value each time: setting the value already there is no release
		last = setAnnotation(k8s, probe, lockv1.AnnotationHolderRelease, fmt.Sprintf("x/%d", n))
		return last != nil && strings.Contains(last.Error(), "presented no pod identity")
	}, func() string { return fmt.Sprintf("policy not enforced: last answer %v", last) })
}

// workerPod creates a pod running as service account "worker", Running and Ready, and a
// client that authenticates with a token bound to it.
func (f *fixture) workerPod(name, app string) (*corev1.Pod, client.Client) {
	f.t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{ServiceAccountName: "worker", Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
	}
	if err := k8s.Create(bg(), p); err != nil {
		f.t.Fatalf("create pod %s: %v", name, err)
	}
	f.setReady(p, true)
	cfg, err := env.PodConfig(bg(), p)
	if err != nil {
		f.t.Fatalf("pod token: %v", err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		f.t.Fatalf("pod client: %v", err)
	}
	return p, c
}

// setAnnotation sends a JSON merge patch of one annotation, as pkg/leadership does.
func setAnnotation(c client.Client, l *lockv1.DistributedLock, key, value string) error {
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
	obj := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: l.Namespace, Name: l.Name}}
	return c.Patch(bg(), obj, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// TestHolderReleaseHandsOverWithoutDelay: the holder's own release, sent with its pod-bound
// token, is admitted, and the next candidate is granted without the 30 s lock delay.
func TestHolderReleaseHandsOverWithoutDelay(t *testing.T) {
	f := newFixture(t)
	f.releaseSetup()
	a0, c0 := f.workerPod("a-0", "a")
	f.workerPod("a-1", "a")
	l := f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = new(int32(30)) })
	held := f.waitFor("lock", 10*time.Second, "held by a-0", heldBy("a-0"))

	sent := time.Now()
	if err := setAnnotation(c0, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(a0.UID, held.Status.FencingToken)); err != nil {
		t.Fatalf("holder's own release refused: %v", err)
	}
	// 10 s is a third of the lock delay: a handoff that waited it fails here.
	next := f.waitFor("lock", 10*time.Second, "held by a-1 before the lock delay", heldBy("a-1"))
	t.Logf("holder-confirmed handoff: a-1 held %v after the release was admitted (lockDelay 30s)", time.Since(sent).Round(time.Millisecond))
	if next.Status.FencingToken <= held.Status.FencingToken {
		t.Errorf("next token = %d, want above %d", next.Status.FencingToken, held.Status.FencingToken)
	}
	if len(next.Status.History) < 2 || next.Status.History[1].Token != held.Status.FencingToken || next.Status.History[1].Reason != lockv1.ReasonHolderReleased {
		t.Errorf("history = %+v, want the term of token %d ended with %s", next.Status.History, held.Status.FencingToken, lockv1.ReasonHolderReleased)
	}
}

// TestHolderReleaseRefused: a release from another pod's token, for an old token, with a
// change besides the annotation, from a non-pod identity or on create is refused by the API
// server with the policy's message, and the term goes on untouched. A candidate pod cannot
// change the spec through its patch permission either.
func TestHolderReleaseRefused(t *testing.T) {
	f := newFixture(t)
	f.releaseSetup()
	a0, c0 := f.workerPod("a-0", "a")
	a1, c1 := f.workerPod("a-1", "a")
	l := f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = new(int32(30)) })
	held := f.waitFor("lock", 10*time.Second, "held by a-0", heldBy("a-0"))
	tok := held.Status.FencingToken

	for _, tc := range []struct {
		name string
		send func() error
		want string
	}{
		{"another pod names the holder's term", func() error {
			return setAnnotation(c1, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(a0.UID, tok))
		}, fmt.Sprintf("the request comes from pod %s, but the holder is pod %s", a1.UID, a0.UID)},
		{"another pod names itself", func() error {
			return setAnnotation(c1, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(a1.UID, tok))
		}, fmt.Sprintf("the request comes from pod %s, but the holder is pod %s", a1.UID, a0.UID)},
		{"the holder names an old token", func() error {
			return setAnnotation(c0, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(a0.UID, tok-1))
		}, fmt.Sprintf("%s/%d does not name the term being held (%s/%d)", a0.UID, tok-1, a0.UID, tok)},
		{"the holder changes another annotation too", func() error {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,"team":"x"}}}`, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(a0.UID, tok))
			return c0.Patch(bg(), l.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch)))
		}, "a release may change nothing but that annotation"},
		{"an administrator (no pod identity)", func() error {
			return setAnnotation(k8s, l, lockv1.AnnotationHolderRelease, lockv1.HolderReleaseValue(a0.UID, tok))
		}, "presented no pod identity"},
		{"a candidate pod edits the spec", func() error {
			return c1.Patch(bg(), l.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":true}}`)))
		}, fmt.Sprintf("system:serviceaccount:%s:worker may change only the lockwarden.io/holder-release annotation", f.ns)},
		{"a candidate pod sends an operator's request", func() error {
			return setAnnotation(c1, l, lockv1.AnnotationReleaseRequest, fmt.Sprint(tok))
		}, "may change only the lockwarden.io/holder-release annotation"},
		{"a lock created with the annotation", func() error {
			n := &lockv1.DistributedLock{
				ObjectMeta: metav1.ObjectMeta{Name: "born-released", Namespace: f.ns, Annotations: map[string]string{lockv1.AnnotationHolderRelease: lockv1.HolderReleaseValue(a0.UID, tok)}},
				Spec:       lockv1.DistributedLockSpec{Candidates: lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"app": "a"})}, LeaseDurationSeconds: 2},
			}
			return k8s.Create(bg(), n)
		}, "cannot be set when a DistributedLock is created"},
	} {
		err := tc.send()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want a refusal containing %q", tc.name, err, tc.want)
		}
	}
	// Nothing was lost: the same term, no annotation, the spec as it was.
	got := f.get("lock")
	if got.Status.Phase != lockv1.PhaseHeld || got.Status.HolderUID != a0.UID || got.Status.FencingToken != tok {
		t.Errorf("after the refusals: %s, want Held by a-0 with token %d", describe(got), tok)
	}
	if _, ok := got.Annotations[lockv1.AnnotationHolderRelease]; ok || got.Spec.Suspend {
		t.Errorf("after the refusals: annotations %v, suspend %v; want no release and the spec unchanged", got.Annotations, got.Spec.Suspend)
	}
}

// TestOperatorReleaseWaitsTheFullDelay: an operator's request for the current token moves the
// term to Releasing, records the reason, emits an Event, and the next holder comes only after
// the full lock delay; a request for another token changes nothing and is reported.
func TestOperatorReleaseWaitsTheFullDelay(t *testing.T) {
	f := newFixture(t)
	f.releaseSetup()
	f.workerPod("a-0", "a")
	f.workerPod("a-1", "a")
	const delay = 4 * time.Second
	l := f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = new(int32(4)) })
	held := f.waitFor("lock", 10*time.Second, "held by a-0", heldBy("a-0"))
	tok := held.Status.FencingToken

	if err := setAnnotation(k8s, l, lockv1.AnnotationReleaseRequest, fmt.Sprint(tok-1)); err != nil {
		t.Fatalf("operator request: %v", err)
	}
	f.waitEvent(lockv1.ReasonReleaseRequestIgnored, corev1.EventTypeWarning, fmt.Sprintf("release request for token %d ignored", tok-1))
	if got := f.get("lock"); got.Status.Phase != lockv1.PhaseHeld || got.Status.FencingToken != tok {
		t.Fatalf("after a request for another token: %s, want Held with token %d", describe(got), tok)
	}

	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d",%q:"drain node-3"}}}`, lockv1.AnnotationReleaseRequest, tok, lockv1.AnnotationReleaseReason)
	sent := time.Now()
	if err := k8s.Patch(bg(), l.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("operator request: %v", err)
	}
	rel := f.waitFor("lock", 10*time.Second, "Releasing", inPhase(lockv1.PhaseReleasing))
	if h := rel.Status.History[0]; h.Token != tok || h.Reason != lockv1.ReasonOperatorRelease || h.Message != "drain node-3" {
		t.Errorf("open term = %+v, want token %d, reason %s, message %q", h, tok, lockv1.ReasonOperatorRelease, "drain node-3")
	}
	f.waitEvent(lockv1.ReasonOperatorRelease, corev1.EventTypeNormal, fmt.Sprintf("operator asked to end the term of a-0 (token %d): drain node-3", tok))
	next := f.waitFor("lock", 20*time.Second, "held by a-1", heldBy("a-1"))
	took := time.Since(sent)
	t.Logf("operator release: a-1 held %v after the request (lockDelay %v)", took.Round(time.Millisecond), delay)
	if took < delay {
		t.Errorf("a-1 held %v after the operator's request, before the lock delay %v", took, delay)
	}
	if h := next.Status.History[1]; h.Token != tok || h.Reason != lockv1.ReasonOperatorRelease || h.Ended == nil || h.Message != "drain node-3" {
		t.Errorf("ended term = %+v, want token %d ended with %s and the operator's message", h, tok, lockv1.ReasonOperatorRelease)
	}
}

// waitEvent waits for an Event on the fixture's namespace with reason, type and a note
// containing text.
func (f *fixture) waitEvent(reason, typ, text string) {
	f.t.Helper()
	var seen []string
	eventually(f.t, 10*time.Second, func() bool {
		var evs eventsv1.EventList
		if err := k8s.List(bg(), &evs, client.InNamespace(f.ns)); err != nil {
			return false
		}
		seen = seen[:0]
		for _, e := range evs.Items {
			seen = append(seen, e.Type+" "+e.Reason+": "+e.Note)
			if e.Reason == reason && e.Type == typ && strings.Contains(e.Note, text) {
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("no %s Event %s containing %q; seen %q", typ, reason, text, seen) })
}

// TestElectorShutdownHandsOverWithoutDelay: pkg/leadership's release end to end. The holder's
// elector stops (as on SIGTERM): its work returns, then it confirms the release with its own
// pod-bound token, and the controller grants the next candidate without the 30 s lock delay.
func TestElectorShutdownHandsOverWithoutDelay(t *testing.T) {
	f := newFixture(t)
	f.releaseSetup()
	a0, _ := f.workerPod("a-0", "a")
	f.workerPod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = new(int32(30)) })
	held := f.waitFor("lock", 10*time.Second, "held by a-0", heldBy("a-0"))
	cfg, err := env.PodConfig(bg(), a0)
	if err != nil {
		t.Fatalf("pod token: %v", err)
	}
	var workReturned atomic.Bool
	el, err := leadership.New(leadership.Config{Config: cfg, Namespace: f.ns, Lock: "lock", Identity: a0.UID, Name: a0.Name, ReleaseOnStop: true,
		Callbacks: leadership.Callbacks{OnStartedLeading: func(ctx context.Context, _ int64) {
			<-ctx.Done()
			workReturned.Store(true)
		}}})
	if err != nil {
		t.Fatalf("elector: %v", err)
	}
	ctx, cancel := context.WithCancel(bg())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	eventually(t, 10*time.Second, func() bool { return el.Token() == held.Status.FencingToken },
		func() string { return fmt.Sprintf("a-0's elector never led token %d", held.Status.FencingToken) })

	stopped := time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if !workReturned.Load() {
		t.Fatalf("Run returned before OnStartedLeading did")
	}
	next := f.waitFor("lock", 10*time.Second, "held by a-1 before the lock delay", heldBy("a-1"))
	t.Logf("elector shutdown handoff: a-1 held %v after a-0's Run was cancelled (lockDelay 30s)", time.Since(stopped).Round(time.Millisecond))
	if h := next.Status.History[1]; h.Token != held.Status.FencingToken || h.Reason != lockv1.ReasonHolderReleased {
		t.Errorf("ended term = %+v, want token %d ended with %s", h, held.Status.FencingToken, lockv1.ReasonHolderReleased)
	}
}
