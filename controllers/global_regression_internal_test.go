package controllers

import (
	"context"
	"strings"
	"testing"

	"k8s.io/client-go/tools/events"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestGlobalRegressionHealthy: a Global lock's TokenRegression step fails /readyz's tokens
// check (Healthy, which Active.Healthy asks too) with one Warning Event on entering it; any
// other step of that lock, or its deletion, clears it.
func TestGlobalRegressionHealthy(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	r := &GlobalReconciler{Recorder: rec}
	r.init()
	lock := &lockv1.DistributedLock{}
	regressed := globalStep{verb: gIdle, reason: lockv1.ReasonTokenRegression, why: "the shared etcd is at revision 40, below the published token 900"}
	ctx := context.Background()
	if err := r.Healthy(); err != nil {
		t.Fatalf("Healthy = %v before any step", err)
	}
	r.noteRegression(ctx, lock, "ns/x", regressed)
	r.noteRegression(ctx, lock, "ns/x", regressed)
	if err := r.Healthy(); err == nil || !strings.Contains(err.Error(), "ns/x") || !strings.Contains(err.Error(), "900") {
		t.Fatalf("Healthy = %v; want the lock and the tokens named", err)
	}
	if n := len(rec.Events); n != 1 {
		t.Fatalf("%d Events; want one on entering the regression", n)
	}
	if e := <-rec.Events; !strings.Contains(e, lockv1.ReasonTokenRegression) {
		t.Errorf("Event %q; want reason %s", e, lockv1.ReasonTokenRegression)
	}
	r.noteRegression(ctx, lock, "ns/x", globalStep{verb: gIdle, why: "held elsewhere"})
	if err := r.Healthy(); err != nil {
		t.Fatalf("Healthy = %v after a step without regression", err)
	}
	r.noteRegression(ctx, lock, "ns/y", regressed)
	r.forget("ns/y")
	if err := r.Healthy(); err != nil {
		t.Fatalf("Healthy = %v after the lock was forgotten", err)
	}
}
