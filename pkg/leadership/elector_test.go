package leadership_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/internal/apiproxy"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// TestStartsAndStopsWithStatus follows a pod through a grant, a Releasing status and another
// holder's grant: it leads exactly while the status names it with phase Held, stops at once on
// the watch event (no read in between), and stays ready throughout.
func TestStartsAndStopsWithStatus(t *testing.T) {
	h := newHarness(t, 30)
	el := h.run(t, h.config("pod-a", "uid-a"))
	h.waitReads(t, 1)
	if el.Valid() || el.Token() != 0 || !el.ValidUntil().IsZero() {
		t.Errorf("before any grant: Valid() = %v, Token() = %d, ValidUntil() = %v; want false, 0, zero", el.Valid(), el.Token(), el.ValidUntil())
	}
	if err := el.ReadyzCheck(nil); err != nil {
		t.Errorf("ReadyzCheck() before any grant = %v, want nil", err)
	}
	if err := el.Run(t.Context()); !errors.Is(err, leadership.ErrAlreadyRan) {
		t.Errorf("second Run() = %v, want %v", err, leadership.ErrAlreadyRan)
	}

	setStatus(t, h.key, held("pod-a", "uid-a", 10, 30))
	h.rec.waitEvents(t, "holder(pod-a,10) start(10)")
	if !el.Valid() || el.Token() != 10 {
		t.Errorf("after the grant: Valid() = %v, Token() = %d; want true, 10", el.Valid(), el.Token())
	}
	last, _ := h.reads.lastOK()
	if got, latest := el.ValidUntil(), last.sent.Add(30*time.Second-leadership.DefaultMargin(30*time.Second)); got.After(latest) || !got.After(time.Now()) {
		t.Errorf("ValidUntil() = %v from now, want in the future and at most %v from now (last read's send + L - margin)",
			time.Until(got), time.Until(latest))
	}

	written := time.Now()
	setStatus(t, h.key, releasing)
	evs := h.rec.waitEvents(t, "holder(pod-a,10) start(10) stop")
	if el.Valid() || el.Token() != 0 || !el.ValidUntil().IsZero() {
		t.Errorf("after Releasing: Valid() = %v, Token() = %d, ValidUntil() = %v; want false, 0, zero", el.Valid(), el.Token(), el.ValidUntil())
	}
	if n := h.reads.sentBetween(written, evs[2].at); n != 0 {
		t.Errorf("reads sent between the Releasing write and the stop: got %d, want 0 (the watch event ends the term)", n)
	}

	setStatus(t, h.key, held("pod-b", "uid-b", 11, 30))
	h.rec.waitEvents(t, "holder(pod-a,10) start(10) stop holder(pod-b,11)")
	if el.Valid() {
		t.Errorf("while pod-b holds: Valid() = true, want false")
	}
	if err := el.ReadyzCheck(nil); err != nil {
		t.Errorf("ReadyzCheck() while another pod holds = %v, want nil", err)
	}
}

// TestTermStartsPromptly shows that a grant is led after one watch delivery and one GET of
// the grant, not at the next periodic read: exactly one read is sent between the grant and
// OnStartedLeading, and the term starts before the periodic read (L/3 = 10 s after the
// previous one) would have been sent.
func TestTermStartsPromptly(t *testing.T) {
	h := newHarness(t, 30)
	el := h.run(t, h.config("pod-a", "uid-a"))
	h.waitReads(t, 1)
	before, _ := h.reads.lastOK()

	granted := time.Now()
	setStatus(t, h.key, held("pod-a", "uid-a", 7, 30))
	evs := h.rec.waitEvents(t, "holder(pod-a,7) start(7)")
	started := evs[1].at
	if n := h.reads.sentBetween(granted, started); n != 1 {
		t.Errorf("reads sent between the grant and OnStartedLeading: got %d, want 1", n)
	}
	if periodic := before.sent.Add(10 * time.Second); !started.Before(periodic) {
		t.Errorf("term started %v after the previous read, want before the periodic read at %v", started.Sub(before.sent), periodic.Sub(before.sent))
	}
	if el.Token() != 7 {
		t.Errorf("Token() = %d, want 7", el.Token())
	}
	t.Logf("grant's status write acknowledged to OnStartedLeading: %v (the periodic read was %v away)",
		started.Sub(granted).Round(time.Millisecond), before.sent.Add(10*time.Second).Sub(granted).Round(time.Millisecond))
}

// TestNewTermOnTokenChange shows that a new token for the same pod is a new term: the old
// term stops, then the new one starts with the new token.
func TestNewTermOnTokenChange(t *testing.T) {
	h := newHarness(t, 30)
	el := h.run(t, h.config("pod-a", "uid-a"))
	h.waitReads(t, 1)
	setStatus(t, h.key, held("pod-a", "uid-a", 10, 30))
	h.rec.waitEvents(t, "holder(pod-a,10) start(10)")

	setStatus(t, h.key, held("pod-a", "uid-a", 12, 30))
	h.rec.waitEvents(t, "holder(pod-a,10) start(10) stop holder(pod-a,12) start(12)")
	if !el.Valid() || el.Token() != 12 {
		t.Errorf("after the new grant: Valid() = %v, Token() = %d; want true, 12", el.Valid(), el.Token())
	}
}

// TestRecreatedPodIsNotTheHolder deletes the holder pod and creates it again under the same
// name: the new pod (new UID) sees the status naming its name but the old UID, and does not
// lead, until a grant names its own UID.
func TestRecreatedPodIsNotTheHolder(t *testing.T) {
	h := newHarness(t, 3)
	oldUID := createPod(t, h.key.Namespace, "worker-0")
	setStatus(t, h.key, held("worker-0", oldUID, 7, 3))
	deletePod(t, h.key.Namespace, "worker-0")
	newUID := createPod(t, h.key.Namespace, "worker-0")
	if newUID == oldUID {
		t.Fatalf("re-created pod UID = %s, want a new UID", newUID)
	}

	el := h.run(t, h.config("worker-0", newUID))
	h.rec.waitEvents(t, "holder(worker-0,7)")
	// The third read is sent only after the loop took the second, so the first (showing the
	// old UID) has been fully applied.
	h.waitReads(t, 3)
	if el.Valid() || el.Token() != 0 {
		t.Errorf("status naming worker-0 with the old UID: Valid() = %v, Token() = %d; want false, 0", el.Valid(), el.Token())
	}
	if got := h.rec.String(); got != "holder(worker-0,7)" {
		t.Errorf("callbacks: got %q, want %q", got, "holder(worker-0,7)")
	}
	if err := el.ReadyzCheck(nil); err != nil {
		t.Errorf("ReadyzCheck() = %v, want nil", err)
	}

	setStatus(t, h.key, held("worker-0", newUID, 8, 3))
	h.rec.waitEvents(t, "holder(worker-0,7) holder(worker-0,8) start(8)")
}

// TestCutOffFromAPIServer blackholes the proxy between the elector and the API server while
// it leads (L = 3 s): Valid() turns false by S + L - margin of the last confirming read and
// not before that deadline - margin; ReadyzCheck fails once L - margin has passed since that
// read, not before. When the API server answers again the pod leads again.
func TestCutOffFromAPIServer(t *testing.T) {
	const lease = 3 * time.Second
	margin := leadership.DefaultMargin(lease)
	h := newHarness(t, 3)
	el := h.run(t, h.config("pod-a", "uid-a"))
	setStatus(t, h.key, held("pod-a", "uid-a", 5, 3))
	h.rec.waitEvents(t, "holder(pod-a,5) start(5)")

	// Periodic reads (every L/3) move the deadline.
	first := el.ValidUntil()
	h.waitReads(t, h.reads.okCount()+2)
	if got := el.ValidUntil(); !got.After(first) {
		t.Errorf("ValidUntil() after two more reads = %v, want after %v", got, first)
	}

	h.proxy.SetMode(apiproxy.Hold)
	var lost, unready time.Time
	var readyErr error
	eventually(t, 10*time.Second, func() bool {
		at := time.Now()
		if lost.IsZero() && !el.Valid() {
			lost = at
		}
		if unready.IsZero() {
			if readyErr = el.ReadyzCheck(nil); readyErr != nil {
				unready = at
			}
		}
		return !lost.IsZero() && !unready.IsZero()
	}, func() string {
		return fmt.Sprintf("Valid() = %v, ReadyzCheck() = %v; want false and an error", el.Valid(), el.ReadyzCheck(nil))
	})

	// The elector's send time S precedes the transport's, so last.sent + L - margin is the
	// latest deadline it may have computed.
	last, _ := h.reads.lastOK()
	deadline := last.sent.Add(lease - margin)
	const late = 300 * time.Millisecond // polling and scheduling on a busy machine
	if lost.After(deadline.Add(late)) || lost.Before(deadline.Add(-margin)) {
		t.Errorf("Valid() turned false %v after the last confirming read was sent, want within [%v, %v]",
			lost.Sub(last.sent), lease-2*margin, lease-margin+late)
	}
	if unready.After(deadline.Add(late)) || unready.Before(deadline.Add(-margin)) {
		t.Errorf("ReadyzCheck() failed %v after the last confirming read was sent, want within [%v, %v]",
			unready.Sub(last.sent), lease-2*margin, lease-margin+late)
	}
	if !strings.Contains(readyErr.Error(), "no consistent read") {
		t.Errorf("ReadyzCheck() = %q, want it to say there was no consistent read", readyErr)
	}
	h.rec.waitEvents(t, "holder(pod-a,5) start(5) stop")

	h.proxy.SetMode(apiproxy.Pass)
	h.rec.waitEvents(t, "holder(pod-a,5) start(5) stop start(5)")
	eventually(t, 10*time.Second, func() bool { return el.ReadyzCheck(nil) == nil },
		func() string {
			return fmt.Sprintf("ReadyzCheck() after reconnecting = %v, want nil", el.ReadyzCheck(nil))
		})
}

// TestReplayedWatchEventIsIgnored replays old watch frames into the elector's live watch. Each
// replayed frame is followed in the same stream by a real event, so the callbacks show whether
// the old one was applied (an applied old grant calls OnNewHolder): an old grant to this pod
// prompts no read and starts nothing, and an old grant to another pod does not end the
// current term.
func TestReplayedWatchEventIsIgnored(t *testing.T) {
	h := newHarness(t, 30)
	el := h.run(t, h.config("pod-a", "uid-a"))
	h.waitReads(t, 1)
	setStatus(t, h.key, held("pod-a", "uid-a", 10, 30))
	h.rec.waitEvents(t, "holder(pod-a,10) start(10)")
	grant10 := findFrame(t, h.proxy, lockv1.PhaseHeld, "uid-a", 10)
	setStatus(t, h.key, held("pod-b", "uid-b", 11, 30))
	h.rec.waitEvents(t, "holder(pod-a,10) start(10) stop holder(pod-b,11)")
	grant11 := findFrame(t, h.proxy, lockv1.PhaseHeld, "uid-b", 11)

	replayed := time.Now()
	if n := h.proxy.Replay(grant10); n != 1 {
		t.Fatalf("Replay(grant of token 10 to pod-a) reached %d watch streams, want 1", n)
	}
	setStatus(t, h.key, held("pod-c", "uid-c", 12, 30))
	h.rec.waitEvents(t, "holder(pod-a,10) start(10) stop holder(pod-b,11) holder(pod-c,12)")
	if n := h.reads.sentAfter(replayed); n != 0 {
		t.Errorf("reads sent after the replayed grant: got %d, want 0 (an old event is dropped, it prompts nothing)", n)
	}
	if el.Valid() {
		t.Errorf("Valid() after the replayed grant = true, want false")
	}

	setStatus(t, h.key, held("pod-a", "uid-a", 13, 30))
	h.rec.waitEvents(t, "holder(pod-a,10) start(10) stop holder(pod-b,11) holder(pod-c,12) holder(pod-a,13) start(13)")
	if n := h.proxy.Replay(grant11); n != 1 {
		t.Fatalf("Replay(grant of token 11 to pod-b) reached %d watch streams, want 1", n)
	}
	setStatus(t, h.key, held("pod-c", "uid-c", 14, 30))
	h.rec.waitEvents(t, "holder(pod-a,10) start(10) stop holder(pod-b,11) holder(pod-c,12) holder(pod-a,13) start(13) stop holder(pod-c,14)")
}

// TestStopBudget holds OnStoppedLeading past the stop budget: ReadyzCheck fails once the
// budget has passed, not before; the next term is led at once (Valid) but its callbacks wait
// for the previous ones; readiness returns when they are done.
func TestStopBudget(t *testing.T) {
	const budget = 300 * time.Millisecond
	h := newHarness(t, 30)
	h.rec.stopGate = make(chan struct{})
	cfg := h.config("pod-a", "uid-a")
	cfg.StopBudget = budget
	el := h.run(t, cfg)
	h.waitReads(t, 1)
	setStatus(t, h.key, held("pod-a", "uid-a", 10, 30))
	h.rec.waitEvents(t, "holder(pod-a,10) start(10)")

	ended := time.Now() // the term ends after this
	setStatus(t, h.key, releasing)
	h.rec.waitEvents(t, "holder(pod-a,10) start(10) stop")
	var failed time.Time
	var readyErr error
	eventually(t, 5*time.Second, func() bool {
		if readyErr = el.ReadyzCheck(nil); readyErr != nil {
			failed = time.Now()
		}
		return readyErr != nil
	}, func() string { return "ReadyzCheck() = nil while OnStoppedLeading overruns, want an error" })
	if failed.Before(ended.Add(budget)) {
		t.Errorf("ReadyzCheck() failed %v after the term ended, want not before the stop budget %v", failed.Sub(ended), budget)
	}
	if !strings.Contains(readyErr.Error(), "stop budget") {
		t.Errorf("ReadyzCheck() = %q, want it to name the stop budget", readyErr)
	}

	setStatus(t, h.key, held("pod-a", "uid-a", 12, 30))
	eventually(t, 10*time.Second, func() bool { return el.Valid() && el.Token() == 12 },
		func() string { return fmt.Sprintf("Valid() = %v, Token() = %d; want true, 12", el.Valid(), el.Token()) })
	if got, want := h.rec.String(), "holder(pod-a,10) start(10) stop"; got != want {
		t.Errorf("callbacks while OnStoppedLeading runs: got %q, want %q", got, want)
	}
	close(h.rec.stopGate)
	h.rec.waitEvents(t, "holder(pod-a,10) start(10) stop holder(pod-a,12) start(12)")
	eventually(t, 5*time.Second, func() bool { return el.ReadyzCheck(nil) == nil },
		func() string {
			return fmt.Sprintf("ReadyzCheck() after the callbacks returned = %v, want nil", el.ReadyzCheck(nil))
		})
}

// TestRefusesTermWithTooLargeMargin grants a term whose lease is not more than twice the
// configured margin: the pod does not lead it and is not ready while the grant stands.
func TestRefusesTermWithTooLargeMargin(t *testing.T) {
	h := newHarness(t, 4)
	cfg := h.config("pod-a", "uid-a")
	cfg.Margin = 2 * time.Second
	el := h.run(t, cfg)
	h.waitReads(t, 1)

	setStatus(t, h.key, held("pod-a", "uid-a", 10, 4))
	var readyErr error
	eventually(t, 10*time.Second, func() bool { readyErr = el.ReadyzCheck(nil); return readyErr != nil },
		func() string { return "ReadyzCheck() = nil while granted a term of 4s with Margin 2s, want an error" })
	if !strings.Contains(readyErr.Error(), "Margin") {
		t.Errorf("ReadyzCheck() = %q, want it to name Margin", readyErr)
	}
	// The refusal and any start are decided on the same observation, and reads keep coming.
	h.waitReads(t, h.reads.okCount()+2)
	if el.Valid() || strings.Contains(h.rec.String(), "start") {
		t.Errorf("refused term: Valid() = %v, callbacks %q; want false and no start", el.Valid(), h.rec)
	}

	setStatus(t, h.key, held("pod-b", "uid-b", 11, 4))
	eventually(t, 10*time.Second, func() bool { return el.ReadyzCheck(nil) == nil },
		func() string {
			return fmt.Sprintf("ReadyzCheck() once another pod holds = %v, want nil", el.ReadyzCheck(nil))
		})
}

// createPod creates a pod (no kubelet runs here; only its UID matters) and returns its UID.
func createPod(t *testing.T, ns, name string) types.UID {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "worker"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "worker", Image: "worker:test"}}},
	}
	if err := k8s.Create(t.Context(), pod); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return pod.UID
}

// deletePod deletes a pod and waits until it is gone (an unscheduled pod goes at once).
func deletePod(t *testing.T, ns, name string) {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	if err := k8s.Delete(t.Context(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatalf("delete pod %s: %v", name, err)
	}
	eventually(t, 10*time.Second, func() bool {
		return apierrors.IsNotFound(k8s.Get(context.Background(), client.ObjectKeyFromObject(pod), &corev1.Pod{}))
	}, func() string { return fmt.Sprintf("pod %s still exists, want it gone", name) })
}

// watchFrame is the part of a watch event the tests look at.
type watchFrame struct {
	Type   string                 `json:"type"`
	Object lockv1.DistributedLock `json:"object"`
}

// findFrame returns the newest captured MODIFIED watch frame showing phase, holder UID and
// token.
func findFrame(t *testing.T, p *apiproxy.Proxy, phase lockv1.Phase, uid types.UID, token int64) apiproxy.Frame {
	t.Helper()
	var found apiproxy.Frame
	eventually(t, 5*time.Second, func() bool {
		frames := p.Frames()
		for i := len(frames) - 1; i >= 0; i-- {
			var f watchFrame
			if json.Unmarshal(frames[i].Data, &f) != nil {
				continue
			}
			st := f.Object.Status
			if f.Type == "MODIFIED" && st.Phase == phase && st.HolderUID == uid && st.FencingToken == token {
				found = frames[i]
				return true
			}
		}
		return false
	}, func() string {
		return fmt.Sprintf("no captured MODIFIED frame with phase %s, holder %s, token %d", phase, uid, token)
	})
	return found
}
