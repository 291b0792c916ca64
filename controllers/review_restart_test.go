package controllers_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// heldByFirstOfTwo creates pods a-0 and a-1 (a-0 older) and the lock "lock" with a 600 s lock
// delay, and waits for a-0 to hold it.
func (f *fixture) heldByFirstOfTwo() (*corev1.Pod, *lockv1.DistributedLock) {
	f.t.Helper()
	a0 := f.pod("a-0", "a")
	secondApart()
	f.pod("a-1", "a")
	f.lock("lock", "a", func(s *lockv1.DistributedLockSpec) { s.LockDelaySeconds = ptrTo[int32](600) })
	return a0, f.waitFor("lock", 20*time.Second, "held by a-0", heldBy("a-0"))
}

// TestReviewUnmarkedRecordCrashRestartKeepsToken (review of 0ad4f85, wiring of
// TestReviewUnmarkedRecordRestartKeepsToken): a term whose etcd record has no containers, as
// the previous controller version granted it (or as an old-version replica rewrote it during
// a rolling upgrade: its record struct drops the field). The holder's container crashes and
// the kubelet restarts it: the term goes Releasing, then back to Held with the SAME token
// after max(L/3, 2 s), the defect issue 20 item 3 set out to remove. Fails on 0ad4f85.
func TestReviewUnmarkedRecordCrashRestartKeepsToken(t *testing.T) {
	f := newFixture(t)
	a0, held := f.heldByFirstOfTwo()
	// The record as the previous version wrote it: no containers.
	old, err := json.Marshal(map[string]any{"name": "a-0", "phase": lockv1.PhaseHeld, "strategy": held.Spec.Strategy,
		"leaseSeconds": held.Spec.LeaseDurationSeconds, "epoch": held.Status.ControllerEpoch})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.engine.UpdateRecord(bg(), f.ns+"/lock", held.Status.FencingToken, old); err != nil {
		t.Fatalf("write the previous version's record: %v", err)
	}
	f.crash(a0, 0)
	f.waitFor("lock", 20*time.Second, "Releasing a-0's term", func(l *lockv1.DistributedLock) bool {
		return l.Status.Phase == lockv1.PhaseReleasing && l.Status.Holder == "a-0"
	})
	f.restarted(a0, 1)
	var last *lockv1.DistributedLock
	consistently(t, 8*time.Second, func() bool {
		last = f.get("lock")
		return last.Status.Phase != lockv1.PhaseHeld || last.Status.FencingToken != held.Status.FencingToken
	}, func() string {
		return fmt.Sprintf("the restarted pod got its old token %d back (record without containers): %s", held.Status.FencingToken, describe(last))
	})
}
