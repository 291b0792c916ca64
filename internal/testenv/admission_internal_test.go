package testenv

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestRideOutConverterDelay: a lock created right after config/policy is applied is admitted,
// with the policy's finalizer, through RideOutConverterDelay. With the bare client the same
// create is refused, for about half a second after the policy is applied on this machine, with
// ServiceUnavailable "Resource kind lockwarden.io/v1alpha1, Kind=DistributedLock not found"
// (the refusal a clean-clone CI run hit in TestFailpointLostReleaseReply).
func TestRideOutConverterDelay(t *testing.T) {
	env, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	bare, err := env.Client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := env.Apply(ctx, bare, PolicyFiles...); err != nil {
		t.Fatal(err)
	}
	c := RideOutConverterDelay(bare, 30*time.Second)
	l := &lockv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: "right-after-the-policy", Namespace: "default"},
		Spec: lockv1.DistributedLockSpec{Candidates: lockv1.Candidates{
			Selector: lockv1.MatchLabels(map[string]string{"app": "x"}),
		}},
	}
	if err := c.Create(ctx, l); err != nil {
		t.Fatalf("create right after config/policy: %v", err)
	}
	if !slices.Contains(l.Finalizers, lockv1.Finalizer) {
		t.Errorf("finalizers %v, want %s (the policy ran)", l.Finalizers, lockv1.Finalizer)
	}
	var stored lockv1.DistributedLock
	if err := bare.Get(ctx, client.ObjectKeyFromObject(l), &stored); err != nil {
		t.Errorf("the admitted lock is not stored: %v", err)
	}
}

func TestConverterDelayed(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"the dispatcher's refusal", apierrors.NewServiceUnavailable("Resource kind lockwarden.io/v1alpha1, Kind=DistributedLock not found. " + converterDelay + "."), true},
		{"another ServiceUnavailable", apierrors.NewServiceUnavailable("etcdserver: leader changed"), false},
		{"the same words, not a 503", errors.New(converterDelay), false},
		{"a conflict", apierrors.NewConflict(lockv1.GroupVersion.WithResource("distributedlocks").GroupResource(), "l", errors.New("x")), false},
		{"nil", nil, false},
	} {
		if got := converterDelayed(tc.err); got != tc.want {
			t.Errorf("%s: converterDelayed = %v, want %v", tc.name, got, tc.want)
		}
	}
}
