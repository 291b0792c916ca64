package main

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// globalLock is a Global lock's status as a manager publishes it (docs/global.md): never
// holderUID; globalHolderUID when this cluster holds the term; globalCluster the holder's
// cluster.
func globalLock(here bool) *lockv1.DistributedLock {
	return testLock(func(l *lockv1.DistributedLock) {
		l.Spec.Scope, l.Spec.GlobalName, l.Spec.Strategy = lockv1.ScopeGlobal, "orders", lockv1.StrategyOldestReady
		l.Spec.Candidates.Selector = lockv1.MatchLabels(map[string]string{"app": "a"})
		l.Status = lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, FencingToken: 900, MaxFencingToken: 900,
			GlobalCluster: "west", GlobalRound: 7, GlobalToken: 900, GlobalLockDelaySeconds: 30}
		if here {
			l.Status.Holder, l.Status.GlobalHolderUID, l.Status.GlobalCluster = "a-0", "u0", "east"
		}
	})
}

func TestGlobalGetAndWhy(t *testing.T) {
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-0", Namespace: "shop", UID: "u0",
		Labels: map[string]string{"app": "a"}, CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}}
	runningReady(&pod.Status)
	for _, tc := range []struct {
		name       string
		lock       *lockv1.DistributedLock
		holderCell string
		why        []string
	}{
		{"held by another cluster", globalLock(false), "@west", []string{
			"global lock orders (shop/web): phase Held", "held by cluster west (token 900)",
			"next: nothing while cluster west holds the term; when its grant is gone, this cluster waits the lock delay (30s) before it grants a-0",
		}},
		{"held here", globalLock(true), "a-0", []string{
			"holder a-0 in this cluster (east, token 900, round 7)", "holder",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := lockTable([]lockv1.DistributedLock{*tc.lock}, t0, false)
			if got := rows[1][1]; got != tc.holderCell {
				t.Errorf("get's HOLDER = %q, want %q", got, tc.holderCell)
			}
			var b strings.Builder
			if err := writeWhy(&b, tc.lock, []corev1.Pod{pod}, map[types.UID]bool{}); err != nil {
				t.Fatal(err)
			}
			for _, want := range tc.why {
				if !strings.Contains(b.String(), want) {
					t.Errorf("why does not say %q:\n%s", want, b.String())
				}
			}
		})
	}
}

// TestGlobalReleaseRefused: release on a Global lock exits 3 and writes nothing.
func TestGlobalReleaseRefused(t *testing.T) {
	f := newFixture(t)
	f.lock("orders", "a", func(s *lockv1.DistributedLockSpec) {
		s.Scope, s.GlobalName, s.LeaseDurationSeconds = lockv1.ScopeGlobal, "orders", 6
	})
	code, _, errOut := dlock(t, "release", "orders", "-n", f.ns, "--reason", "x")
	if code != exitRefused || !strings.Contains(errOut, "release is not supported for Global locks yet") {
		t.Errorf("release of a Global lock = %d %q, want %d saying it is not supported", code, errOut, exitRefused)
	}
	if a := f.get("orders").Annotations; a[lockv1.AnnotationReleaseRequest] != "" {
		t.Errorf("a refused release wrote %v", a)
	}
}
