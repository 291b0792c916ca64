package controllers

// The final adversarial review of issue 20 (a restart never keeps a token; holder-confirmed
// release). Each test fails on main at 2e54c86.

import (
	"testing"
	"time"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// TestReview20FinalReleaseAfterUnprovenRestart: issue 20 item 3 and DESIGN.md's term table:
// a restart without proof that the old process is gone is "Releasing, the full lock delay,
// then a new token", and "the lock goes to another pod only after Releasing and the full lock
// delay". The restarted process is a fresh Elector: it reads Held (a-0, token tok), leads tok
// as a new writer, and on a clean stop confirms its release of tok (ReleaseOnStop,
// lockwarden-agent's default, RunManager's default). Its annotation names status's holder and
// token, admission lets it through (the pod's own service-account token), and termEnd checks
// holderReleased before anything else: the term ends "attested" and a-1 is granted at once.
//
// But the release only says that the process which wrote it has stopped. Without the proof
// (here: a native sidecar running, or the kubelet's ContainerStatusUnknown), the old process
// of the term may still run, and pkg/leadership itself says that a process which cannot speak
// for another writer of its token must not release it (Elector.Abandon). The release of a
// term whose holder restarted since the grant, without proof, should not cut the lock delay.
func TestReview20FinalReleaseAfterUnprovenRestart(t *testing.T) {
	for _, tc := range []struct {
		row   string
		scene *scene
	}{
		{"Held, restarted with a native sidecar running (no proof), the new process releases tok",
			newScene().restarted(sidecar(running("proxy"))).holderRelease("uid-a-0", tok)},
		{"Held, restarted, the kubelet could not locate the old container (no proof), the new process releases tok",
			newScene().restarted(lastEnded(137, "ContainerStatusUnknown", "")).holderRelease("uid-a-0", tok)},
		{"Releasing for the unproven restart (1 s of the delay), the new process releases tok",
			newScene().releasing(time.Second).restarted(lastEnded(137, "ContainerStatusUnknown", "")).do(func(in *input) {
				in.status.History[0].Reason = lockv1.ReasonHolderRestarted
				in.g.rec.Reason = lockv1.ReasonHolderRestarted
			}).holderRelease("uid-a-0", tok)},
	} {
		t.Run(tc.row, func(t *testing.T) {
			// Control: without the release, no other pod is granted now.
			ctl := *tc.scene
			ctl.in.release = releases{}
			if d := decide(&ctl.in); d.next != nil && d.next.Name != "a-0" {
				t.Fatalf("control without the release: decide grants %s now (verb %d reason %q)", d.next.Name, d.verb, d.reason)
			}
			d := decide(&tc.scene.in)
			if d.next != nil && d.next.Name != "a-0" {
				t.Errorf("decide = {verb %d reason %q next %s}: another pod granted at once, while the old process of token %d may still run (restart without proof); want Releasing and the full lock delay first",
					d.verb, d.reason, d.next.Name, tok)
			}
		})
	}
}
