package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

func validSpec() lockv1.DistributedLockSpec {
	return lockv1.DistributedLockSpec{
		Candidates: lockv1.Candidates{Selector: lockv1.MatchLabels(map[string]string{"app": "x"})},
	}
}

func TestSamplesAccepted(t *testing.T) {
	ns := namespace(t)
	files, err := filepath.Glob(filepath.Join(env.Root, "config", "samples", "*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("config/samples: %d files (err %v), want at least 2", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var lock lockv1.DistributedLock
			if err := yaml.UnmarshalStrict(data, &lock); err != nil {
				t.Fatalf("decode %s: %v", f, err)
			}
			lock.Namespace = ns
			if err := k8s.Create(context.Background(), &lock); err != nil {
				t.Fatalf("create %s: %v, want accepted", f, err)
			}
		})
	}
}

func TestDefaultsAppliedByAPIServer(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: "defaults", Namespace: ns}, Spec: validSpec()}
	if err := k8s.Create(ctx, lock); err != nil {
		t.Fatalf("create: %v", err)
	}
	var got lockv1.DistributedLock
	if err := k8s.Get(ctx, objectKey(lock), &got); err != nil {
		t.Fatalf("get: %v", err)
	}
	if got.Spec.LeaseDurationSeconds != 15 {
		t.Errorf("leaseDurationSeconds = %d, want 15", got.Spec.LeaseDurationSeconds)
	}
	if got.Spec.Strategy != lockv1.StrategyOldestReady {
		t.Errorf("strategy = %q, want %q", got.Spec.Strategy, lockv1.StrategyOldestReady)
	}
	if got.Spec.LockDelaySeconds != nil {
		t.Errorf("lockDelaySeconds = %d, want unset", *got.Spec.LockDelaySeconds)
	}
	if d := got.Spec.EffectiveLockDelaySeconds(); d != 15 {
		t.Errorf("EffectiveLockDelaySeconds() = %d, want 15", d)
	}

	long := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: "long", Namespace: ns}, Spec: validSpec()}
	long.Spec.LeaseDurationSeconds = 30
	if err := k8s.Create(ctx, long); err != nil {
		t.Fatalf("create with leaseDurationSeconds 30 and no lockDelaySeconds: %v, want accepted", err)
	}
	if err := k8s.Get(ctx, objectKey(long), &got); err != nil {
		t.Fatalf("get: %v", err)
	}
	if d := got.Spec.EffectiveLockDelaySeconds(); d != 30 {
		t.Errorf("EffectiveLockDelaySeconds() = %d, want 30", d)
	}
}

func TestInvalidSpecsRejected(t *testing.T) {
	ns := namespace(t)
	tests := []struct {
		name      string
		mutate    func(*lockv1.DistributedLockSpec)
		wantField string // the field path the API server's message must name
	}{
		{"lease too short", func(s *lockv1.DistributedLockSpec) { s.LeaseDurationSeconds = 1 }, "spec.leaseDurationSeconds"},
		{"lease too long", func(s *lockv1.DistributedLockSpec) { s.LeaseDurationSeconds = 3601 }, "spec.leaseDurationSeconds"},
		{"lease negative", func(s *lockv1.DistributedLockSpec) { s.LeaseDurationSeconds = -5 }, "spec.leaseDurationSeconds"},
		{"lock delay too short", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptr.To[int32](1) }, "spec.lockDelaySeconds"},
		{"lock delay too long", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptr.To[int32](3601) }, "spec.lockDelaySeconds"},
		{"lock delay below lease", func(s *lockv1.DistributedLockSpec) {
			s.LeaseDurationSeconds = 30
			s.LockDelaySeconds = ptr.To[int32](10)
		}, "spec.lockDelaySeconds"},
		{"lock delay below default lease", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptr.To[int32](5) },
			"spec.lockDelaySeconds: Invalid value: must be at least leaseDurationSeconds, which is 15 (its default when unset); got 5"},
		{"missing selector", func(s *lockv1.DistributedLockSpec) { s.Candidates.Selector = nil }, "spec.candidates.selector"},
		{"empty selector", func(s *lockv1.DistributedLockSpec) { s.Candidates.Selector = &lockv1.LabelSelector{} }, "spec.candidates.selector"},
		{"empty matchLabels", func(s *lockv1.DistributedLockSpec) {
			s.Candidates.Selector = &lockv1.LabelSelector{MatchLabels: map[string]lockv1.LabelValue{}}
		}, "spec.candidates.selector"},
		{"bad selector operator", func(s *lockv1.DistributedLockSpec) {
			s.Candidates.Selector = &lockv1.LabelSelector{MatchExpressions: []lockv1.LabelSelectorRequirement{
				{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"x"}}, {Key: "app", Operator: "Near", Values: []string{"x"}}}}
		}, `spec.candidates.selector.matchExpressions[1].operator: Invalid value: unsupported value "Near"`},
		{"In without values", func(s *lockv1.DistributedLockSpec) {
			s.Candidates.Selector = &lockv1.LabelSelector{MatchExpressions: []lockv1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn}}}
		}, "spec.candidates.selector.matchExpressions[0].values: Invalid value: must be non-empty for In and NotIn and empty for Exists and DoesNotExist"},
		{"unknown strategy", func(s *lockv1.DistributedLockSpec) { s.Strategy = "Random" }, "spec.strategy"},
		{"Preferred without preferredHolder", func(s *lockv1.DistributedLockSpec) { s.Strategy = lockv1.StrategyPreferred }, "spec.preferredHolder"},
		{"preferredHolder without Preferred", func(s *lockv1.DistributedLockSpec) { s.PreferredHolder = "pod-0" }, "spec.preferredHolder"},
		{"preferredHolder not a pod name", func(s *lockv1.DistributedLockSpec) {
			s.Strategy = lockv1.StrategyPreferred
			s.PreferredHolder = "Pod_0"
		}, "spec.preferredHolder"},
		{"preferredHolder too long", func(s *lockv1.DistributedLockSpec) {
			s.Strategy = lockv1.StrategyPreferred
			s.PreferredHolder = strings.Repeat("a", 254)
		}, "spec.preferredHolder"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := validSpec()
			tt.mutate(&spec)
			lock := &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Name: "invalid-" + strings.Repeat("x", i%3) + string(rune('a'+i)), Namespace: ns}, Spec: spec}
			err := k8s.Create(context.Background(), lock)
			if err == nil {
				t.Fatalf("create accepted, want rejected naming %s", tt.wantField)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("create error = %v, want an Invalid error", err)
			}
			if !strings.Contains(err.Error(), tt.wantField) {
				t.Errorf("create error = %q, want it to name %s", err, tt.wantField)
			}
		})
	}
}
