package leadership_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// Releases end to end against a real API server with the shipped admission policy
// (config/policy) and a token bound to a real Pod object: the elector sends the release only
// after the work stopped, and the API server admits it because the token names the holder.

var installPolicy sync.Once

// podIdentity creates, in ns, a service account bound to lockwarden-lock-reader and a pod
// running as it, and returns the pod and a config authenticating with a token bound to it.
func podIdentity(t *testing.T, ns string) (*corev1.Pod, *rest.Config) {
	t.Helper()
	var err error
	installPolicy.Do(func() { err = env.Apply(t.Context(), k8s, "config/rbac/lock_reader_role.yaml", "config/policy") })
	if err != nil {
		t.Fatalf("install policy: %v", err)
	}
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "worker", Namespace: ns}},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "worker-lock-reader", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "lockwarden-lock-reader"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "worker", Namespace: ns}},
		},
		&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "worker-0", Namespace: ns},
			Spec:       corev1.PodSpec{ServiceAccountName: "worker", Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
		},
	}
	for _, o := range objs {
		if err := k8s.Create(t.Context(), o); err != nil {
			t.Fatalf("create %T: %v", o, err)
		}
	}
	pod := objs[2].(*corev1.Pod)
	cfg, err := env.PodConfig(t.Context(), pod)
	if err != nil {
		t.Fatalf("pod token: %v", err)
	}
	return pod, cfg
}

// waitPolicy waits until the API server enforces the policy on the lock at key: an
// administrator's release (no pod identity) is refused.
func waitPolicy(t *testing.T, key client.ObjectKey) {
	t.Helper()
	var last error
	n := 0
	eventually(t, 20*time.Second, func() bool {
		n++
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"probe/%d"}}}`, lockv1.AnnotationHolderRelease, n)
		last = k8s.Patch(t.Context(), &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}},
			client.RawPatch(types.MergePatchType, []byte(patch)))
		return last != nil && strings.Contains(last.Error(), "presented no pod identity")
	}, func() string { return fmt.Sprintf("policy not enforced: %v", last) })
}

// releaseOf reads the lock's holder-release annotation.
func releaseOf(t *testing.T, key client.ObjectKey) string {
	t.Helper()
	var l lockv1.DistributedLock
	if err := k8s.Get(context.Background(), key, &l); err != nil {
		t.Errorf("get lock: %v", err)
		return ""
	}
	return l.Annotations[lockv1.AnnotationHolderRelease]
}

// slowWorker is an OnStartedLeading that keeps working for stopTakes after its context is
// cancelled, and records whether the lock already carried a release when it returned.
type slowWorker struct {
	t         *testing.T
	key       client.ObjectKey
	stopTakes time.Duration
	started   atomic.Int64 // token of the last started term
	returned  atomic.Bool
	early     atomic.Value // a release seen while the work still ran
}

func (w *slowWorker) run(ctx context.Context, token int64) {
	w.started.Store(token)
	<-ctx.Done()
	time.Sleep(w.stopTakes)
	if v := releaseOf(w.t, w.key); strings.HasSuffix(v, fmt.Sprintf("/%d", token)) {
		w.early.Store(v)
	}
	w.returned.Store(true)
}

// TestElectorRelease: the three ways a release is sent (Release, Run's context ending, the
// controller's Releasing) each come after OnStartedLeading returned, name the pod's UID and
// token, are admitted for the pod's own token, and the released token is not led again.
func TestElectorRelease(t *testing.T) {
	for _, how := range []string{"Release", "Run stopped", "Releasing"} {
		t.Run(how, func(t *testing.T) {
			ns := namespace(t)
			key := createLock(t, ns, "leader", 6)
			pod, podCfg := podIdentity(t, ns)
			waitPolicy(t, key)
			setStatus(t, key, held(pod.Name, pod.UID, 40, 6))
			w := &slowWorker{t: t, key: key, stopTakes: 300 * time.Millisecond}
			// Release works without ReleaseOnStop; the other two are ReleaseOnStop's.
			el, err := leadership.New(leadership.Config{Config: podCfg, Namespace: ns, Lock: key.Name, Identity: pod.UID, Name: pod.Name,
				ReleaseOnStop: how != "Release", Callbacks: leadership.Callbacks{OnStartedLeading: w.run}})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- el.Run(ctx) }()
			eventually(t, 10*time.Second, el.Valid, func() string { return "the pod never led token 40" })

			want := lockv1.HolderReleaseValue(pod.UID, 40)
			switch how {
			case "Release":
				if err := el.Release(t.Context()); err != nil {
					t.Fatalf("Release = %v, want nil", err)
				}
				if !w.returned.Load() {
					t.Errorf("Release returned before OnStartedLeading did")
				}
				if got := releaseOf(t, key); got != want {
					t.Errorf("after Release: annotation %q, want %q", got, want)
				}
				// The status still says Held with token 40 (no controller here): a read that
				// shows it must not start the released term again.
				setStatus(t, key, func(s *lockv1.DistributedLockStatus) { s.ObservedGeneration++ })
				deadline := time.Now().Add(1500 * time.Millisecond)
				for time.Now().Before(deadline) {
					if el.Valid() {
						t.Fatalf("the released token 40 is led again")
					}
					time.Sleep(10 * time.Millisecond)
				}
			case "Run stopped":
				cancel()
				if err := <-done; err != nil {
					t.Fatalf("Run = %v, want nil", err)
				}
				done <- nil
				if got := releaseOf(t, key); got != want {
					t.Errorf("after Run returned: annotation %q, want %q", got, want)
				}
			case "Releasing":
				setStatus(t, key, releasing)
				eventually(t, 10*time.Second, func() bool { return releaseOf(t, key) == want },
					func() string { return fmt.Sprintf("annotation %q, want %q", releaseOf(t, key), want) })
			}
			if v := w.early.Load(); v != nil {
				t.Errorf("the release %v was on the lock while OnStartedLeading still ran", v)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v, want nil", err)
			}
		})
	}
}

// TestElectorReleaseRefused: a release the API server refuses (here: sent with an
// administrator's credentials, which name no pod) is returned by Release with the policy's
// message, and the pod may lead that term again; without ReleaseOnStop nothing is sent at
// shutdown.
func TestElectorReleaseRefused(t *testing.T) {
	ns := namespace(t)
	key := createLock(t, ns, "leader", 6)
	podIdentity(t, ns) // installs the policy
	waitPolicy(t, key)
	before := releaseOf(t, key)
	setStatus(t, key, held("worker-x", "uid-x", 41, 6))
	el, err := leadership.New(leadership.Config{Config: env.Config, Namespace: ns, Lock: key.Name, Identity: "uid-x"})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := el.Release(t.Context()); !errors.Is(err, leadership.ErrNotRunning) {
		t.Errorf("Release before Run = %v, want ErrNotRunning", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	eventually(t, 10*time.Second, el.Valid, func() string { return "never led token 41" })
	err = el.Release(t.Context())
	if err == nil || !strings.Contains(err.Error(), "presented no pod identity") {
		t.Errorf("Release with an administrator's token = %v, want the policy's refusal", err)
	}
	// Not released, so the next confirming read leads the term again.
	setStatus(t, key, func(s *lockv1.DistributedLockStatus) { s.ObservedGeneration++ })
	eventually(t, 10*time.Second, el.Valid, func() string { return "a term whose release was refused is not led again" })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if got := releaseOf(t, key); got != before {
		t.Errorf("without ReleaseOnStop, after Run: annotation %q, want %q (nothing sent)", got, before)
	}
	if err := el.Release(t.Context()); !errors.Is(err, leadership.ErrNotRunning) {
		t.Errorf("Release after Run = %v, want ErrNotRunning", err)
	}
}

// TestReleaseOnStopNeedsWorkThatRanTheTerm: with ReleaseOnStop, a term whose OnStartedLeading
// returned while the term lasted (it only started work that may go on elsewhere, as a
// sidecar's token file does) is not released when Run stops, although the API server would
// admit the release.
func TestReleaseOnStopNeedsWorkThatRanTheTerm(t *testing.T) {
	ns := namespace(t)
	key := createLock(t, ns, "leader", 6)
	pod, podCfg := podIdentity(t, ns)
	waitPolicy(t, key)
	before := releaseOf(t, key)
	setStatus(t, key, held(pod.Name, pod.UID, 42, 6))
	var returned atomic.Bool
	el, err := leadership.New(leadership.Config{Config: podCfg, Namespace: ns, Lock: key.Name, Identity: pod.UID, ReleaseOnStop: true,
		Callbacks: leadership.Callbacks{OnStartedLeading: func(context.Context, int64) { returned.Store(true) }}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	eventually(t, 10*time.Second, func() bool { return el.Valid() && returned.Load() }, func() string { return "never led token 42" })
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if got := releaseOf(t, key); got != before {
		t.Errorf("after Run: annotation %q, want %q: a term whose work may go on was released", got, before)
	}
}
