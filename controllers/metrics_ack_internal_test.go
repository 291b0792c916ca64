package controllers

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/client-go/tools/events"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// A term's end and start are counted in lockwarden_transitions_total once their status write
// is acknowledged, as their Events are: a turn whose write is lost (and a later turn that
// adopts its grant) must not count the end twice (review of 199259d, helper-35).
func TestTransitionsCountedOnAck(t *testing.T) {
	tu, _ := reviewTurn(handoffGrantUnpublished(true))
	tu.st = *tu.lock.Status.DeepCopy()
	tu.r.Metrics, tu.r.Recorder = NewMetrics(prometheus.NewRegistry()), events.NewFakeRecorder(10)
	ended := tu.r.Metrics.transitions.WithLabelValues(lockv1.ReasonHolderReleased)
	tu.adopt()
	if got := testutil.ToFloat64(ended); got != 0 {
		t.Fatalf("after adopt, before the status write's acknowledgement: %s transitions = %v, want 0 (a lost write would count the end again on the next turn)", lockv1.ReasonHolderReleased, got)
	}
	tu.acknowledged()
	if got := testutil.ToFloat64(ended); got != 1 {
		t.Errorf("after the acknowledgement: %s transitions = %v, want 1", lockv1.ReasonHolderReleased, got)
	}
}
