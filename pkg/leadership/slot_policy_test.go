package leadership_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// workerPodIn creates another pod running as podIdentity's service account "worker" in ns and
// returns it with a client authenticating with a token bound to it.
func workerPodIn(t *testing.T, ns, name string) (*corev1.Pod, client.Client) {
	t.Helper()
	p, cfg := workerPodConfig(t, ns, name)
	return p, podClient(t, cfg)
}

// workerPodConfig is workerPodIn with a config instead of a client.
func workerPodConfig(t *testing.T, ns, name string) (*corev1.Pod, *rest.Config) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       corev1.PodSpec{ServiceAccountName: "worker", Containers: []corev1.Container{{Name: "app", Image: "example.invalid/app"}}},
	}
	if err := k8s.Create(t.Context(), p); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	cfg, err := env.PodConfig(t.Context(), p)
	if err != nil {
		t.Fatalf("pod token: %v", err)
	}
	return p, cfg
}

func podClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatalf("pod client: %v", err)
	}
	return c
}

// TestSlotReleasePolicy: the shipped admission policy on a lock of several slots, with the
// terms written by the test (no controller, so a release stays on a current term). A slot's
// holder may release its own term; a pod holding no slot may not release, nor remove a
// release naming a current term, and neither may another slot's holder, not even with the
// release of its own term (review 22b: a replaced release let a restarted process of its pod
// lead the released token again; that holder sends its release once the term named ends).
func TestSlotReleasePolicy(t *testing.T) {
	ns := namespace(t)
	key := createLock(t, ns, "leader", 6)
	setSpecSlots(t, key, 3)
	p0, cfg0 := podIdentity(t, ns)
	c0 := podClient(t, cfg0)
	p1, c1 := workerPodIn(t, ns, "worker-1")
	p2, c2 := workerPodIn(t, ns, "worker-2") // holds no slot
	waitPolicy(t, key)
	probe := releaseOf(t, key) // waitPolicy's, naming no term
	setStatus(t, key, held(p1.Name, p1.UID, 100, 6))
	setSlot(t, key, 1, held(p0.Name, p0.UID, 60, 6))
	annotate := func(c client.Client, value string) error {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, lockv1.AnnotationHolderRelease, value)
		return c.Patch(t.Context(), &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
			client.RawPatch(types.MergePatchType, []byte(patch)))
	}
	remove := func(c client.Client) error {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, lockv1.AnnotationHolderRelease)
		return c.Patch(t.Context(), &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key.Name}},
			client.RawPatch(types.MergePatchType, []byte(patch)))
	}
	r0, r1 := lockv1.HolderReleaseValue(p0.UID, 60), lockv1.HolderReleaseValue(p1.UID, 100)
	steps := []struct {
		name string
		send func() error
		want string // "" admitted, else a part of the refusal
		left string // the annotation after the step
	}{
		{"a pod holding no slot names itself", func() error { return annotate(c2, lockv1.HolderReleaseValue(p2.UID, 60)) },
			fmt.Sprintf("the request comes from pod %s, but the holders of its slots are pods %s, %s", p2.UID, p1.UID, p0.UID), probe},
		{"a pod holding no slot names slot 1's term", func() error { return annotate(c2, r0) }, "the request comes from pod " + string(p2.UID), probe},
		{"slot 1's holder names slot 0's term", func() error { return annotate(c0, r1) }, fmt.Sprintf("does not name the term being held (%s)", r0), probe},
		{"slot 1's holder releases its term", func() error { return annotate(c0, r0) }, "", r0},
		{"a pod holding no slot removes it", func() error { return remove(c2) }, "only the holder pod may remove or change it", r0},
		{"a pod holding no slot replaces it with its own", func() error { return annotate(c2, lockv1.HolderReleaseValue(p2.UID, 1)) }, "the request comes from pod " + string(p2.UID), r0},
		{"an administrator removes it", func() error { return remove(k8s) }, "only the holder pod may remove or change it", r0},
		{"slot 0's holder replaces it with its own release", func() error { return annotate(c1, r1) }, "confirms the end of another slot's current term", r0},
		{"slot 1's holder sends its release again", func() error { return annotate(c0, r0) }, "", r0},
		{"slot 0's holder removes slot 1's release", func() error { return remove(c1) }, "only the holder pod may remove or change it", r0},
	}
	for _, s := range steps {
		err := s.send()
		switch {
		case s.want == "" && err != nil:
			t.Errorf("%s: %v, want admitted", s.name, err)
		case s.want != "" && (err == nil || !strings.Contains(err.Error(), s.want)):
			t.Errorf("%s: err = %v, want a refusal containing %q", s.name, err, s.want)
		}
		if got := releaseOf(t, key); got != s.left {
			t.Errorf("after %s: annotation %q, want %q", s.name, got, s.left)
		}
	}
}

// TestSlotReleasesTakeTurns: two slots' holders release at once on a lock with no controller
// acting: the second release is refused while the annotation confirms the first's current
// term (one annotation for all slots, which only its holder may replace) and returns
// ErrReleaseDeferred; that pod leads its released token no more, sends nothing while the first
// term stands, and sends its release once that term has ended.
func TestSlotReleasesTakeTurns(t *testing.T) {
	ns := namespace(t)
	key := createLock(t, ns, "leader", 6)
	setSpecSlots(t, key, 2)
	pa, cfgA := podIdentity(t, ns)
	pb, cfgB := workerPodConfig(t, ns, "worker-1")
	waitPolicy(t, key)
	setStatus(t, key, held(pb.Name, pb.UID, 100, 6))
	setSlot(t, key, 1, held(pa.Name, pa.UID, 60, 6))
	run := func(pod *corev1.Pod, cfg *rest.Config) (*leadership.Elector, func()) {
		el, err := leadership.New(leadership.Config{Config: cfg, Namespace: ns, Lock: key.Name, Identity: pod.UID, Name: pod.Name})
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- el.Run(ctx) }()
		return el, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run = %v, want nil", err)
			}
		}
	}
	ea, stopA := run(pa, cfgA)
	defer stopA()
	eb, stopB := run(pb, cfgB)
	defer stopB()
	eventually(t, 10*time.Second, func() bool { return ea.Valid() && eb.Valid() }, func() string { return "both slots not led" })
	if err := ea.Release(t.Context()); err != nil {
		t.Fatalf("slot 1's release = %v, want nil", err)
	}
	if err := eb.Release(t.Context()); !errors.Is(err, leadership.ErrReleaseDeferred) {
		t.Fatalf("slot 0's release while slot 1's confirms its current term = %v, want ErrReleaseDeferred", err)
	}
	if eb.Valid() {
		t.Errorf("slot 0's pod leads the token it released (deferred)")
	}
	ra, rb := lockv1.HolderReleaseValue(pa.UID, 60), lockv1.HolderReleaseValue(pb.UID, 100)
	rvOf := func() string {
		var l lockv1.DistributedLock
		if err := k8s.Get(t.Context(), key, &l); err != nil {
			t.Fatalf("get lock: %v", err)
		}
		return l.ResourceVersion
	}
	rv := rvOf()
	// Several reads and watch events of each elector: no release goes out meanwhile.
	time.Sleep(2500 * time.Millisecond)
	if got := releaseOf(t, key); got != ra {
		t.Errorf("annotation %q, want %q kept: slot 0's pod replaced slot 1's current release", got, ra)
	}
	if now := rvOf(); now != rv {
		t.Errorf("the lock changed (resourceVersion %s to %s) with no one acting: the releases replace each other", rv, now)
	}
	// The controller's part: slot 1's term ends. Slot 0's pod sends its release.
	setSlot(t, key, 1, func(s *lockv1.DistributedLockStatus) {
		s.Phase, s.Holder, s.HolderUID, s.FencingToken = lockv1.PhasePending, "", "", 0
	})
	eventually(t, 10*time.Second, func() bool { return releaseOf(t, key) == rb },
		func() string {
			return fmt.Sprintf("annotation %q, want %q sent once slot 1's term ended", releaseOf(t, key), rb)
		})
	if ea.Valid() || eb.Valid() {
		t.Errorf("Valid: slot 1's pod %v, slot 0's pod %v; want both false", ea.Valid(), eb.Valid())
	}
}
