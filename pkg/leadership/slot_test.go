package leadership_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// Fenced slots (issue 22) on the pod side, against a real API server: the elector leads the
// slot whose term names its pod, judged by that slot's view alone, and tells the term's slot
// with Slot() and SlotOf(ctx). The test plays the controller, writing status.slots.

// setSlot writes slot i's term as setStatus writes slot 0: after mutate on the slot's view,
// keeping the slot's maxFencingToken at or above its token and never lowering it.
func setSlot(t testing.TB, key client.ObjectKey, i int32, mutate func(*lockv1.DistributedLockStatus)) {
	t.Helper()
	setStatus(t, key, func(s *lockv1.DistributedLockStatus) {
		v := s.SlotView(i)
		prevMax := v.MaxFencingToken
		mutate(&v)
		v.MaxFencingToken = max(v.MaxFencingToken, prevMax, v.FencingToken)
		s.SetSlot(i, v, false)
	})
}

// dropSlot removes slot i (i > 0) from status.slots, as the controller does after a shrink.
func dropSlot(t testing.TB, key client.ObjectKey, i int32) {
	t.Helper()
	setStatus(t, key, func(s *lockv1.DistributedLockStatus) { s.SetSlot(i, lockv1.DistributedLockStatus{}, true) })
}

// setSpecSlots sets the lock's spec.slots.
func setSpecSlots(t testing.TB, key client.ObjectKey, n int32) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"slots":%d}}`, n)
	if err := k8s.Patch(t.Context(), &lockv1.DistributedLock{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}},
		client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatalf("set spec.slots %d: %v", n, err)
	}
}

// slotTerms records, for each OnStartedLeading call, the token, SlotOf(ctx) and Slot() as the
// call began.
type slotTerms struct {
	mu  sync.Mutex
	got []string
}

// wrap makes cbs's OnStartedLeading record its term first.
func (s *slotTerms) wrap(el **leadership.Elector, cbs leadership.Callbacks) leadership.Callbacks {
	start := cbs.OnStartedLeading
	cbs.OnStartedLeading = func(ctx context.Context, token int64) {
		s.mu.Lock()
		s.got = append(s.got, fmt.Sprintf("token %d: SlotOf %d, Slot %d", token, leadership.SlotOf(ctx), (*el).Slot()))
		s.mu.Unlock()
		start(ctx, token)
	}
	return cbs
}

func (s *slotTerms) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.got, "; ")
}

// slotHarness is newHarness on a lock of spec.slots n, with the elector's terms recorded.
func slotHarness(t *testing.T, n int32) (*harness, *slotTerms, leadership.Config) {
	t.Helper()
	h := newHarness(t, 6)
	setSpecSlots(t, h.key, n)
	terms := &slotTerms{}
	cfg := h.config("me", "uid-me")
	cfg.Callbacks = terms.wrap(&h.el, cfg.Callbacks)
	return h, terms, cfg
}

// stays checks for d that the elector does not lead and started no term.
func stays(t *testing.T, h *harness, d time.Duration, why string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if h.el.Valid() || h.el.Slot() != -1 || strings.Contains(h.rec.String(), "start") {
			t.Fatalf("%s: Valid %v, Slot %d, callbacks %q; want not leading", why, h.el.Valid(), h.el.Slot(), h.rec)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSlotHolderLeadsItsSlot: the holder of slot 1 leads with slot 1's token, which is below
// slot 0's (another key's revisions); Slot() and SlotOf(ctx) say 1; a change of another
// slot's term (a new holder and a larger token in slot 0, slot 2 granted) does not touch the
// term; slot 1's Releasing ends it, with Ending's reason from slot 1's history.
func TestSlotHolderLeadsItsSlot(t *testing.T) {
	h, terms, cfg := slotHarness(t, 3)
	setStatus(t, h.key, held("other", "uid-other", 100, 6))
	setSlot(t, h.key, 1, held("me", "uid-me", 60, 6))
	if got := leadership.SlotOf(t.Context()); got != -1 {
		t.Errorf("SlotOf(a context of no term) = %d, want -1", got)
	}
	el := h.run(t, cfg)
	h.rec.waitEvents(t, "holder(me,60) start(60)")
	if got, want := terms.String(), "token 60: SlotOf 1, Slot 1"; got != want {
		t.Errorf("terms = %q, want %q", got, want)
	}
	if el.Token() != 60 || el.Slot() != 1 || !el.Valid() {
		t.Errorf("Token %d, Slot %d, Valid %v; want 60, 1, true", el.Token(), el.Slot(), el.Valid())
	}
	if el.GetLeader() != "me" || el.GetLeaderUID() != "uid-me" {
		t.Errorf("GetLeader %q/%q, want me/uid-me (the holder of this pod's slot)", el.GetLeader(), el.GetLeaderUID())
	}

	// Other slots' terms change: slot 0 gets a new holder and a larger token, slot 2 a term.
	reads := h.reads.okCount()
	setStatus(t, h.key, held("third", "uid-third", 200, 6))
	setSlot(t, h.key, 2, held("fourth", "uid-fourth", 150, 6))
	h.waitReads(t, reads+3)
	if got := h.rec.String(); got != "holder(me,60) start(60)" {
		t.Errorf("after other slots changed: callbacks %q, want the term of 60 untouched", got)
	}
	if el.Token() != 60 || el.Slot() != 1 {
		t.Errorf("after other slots changed: Token %d, Slot %d; want 60, 1", el.Token(), el.Slot())
	}

	// Slot 1's term ends: Releasing, with the controller's reason on its history.
	setSlot(t, h.key, 1, func(s *lockv1.DistributedLockStatus) {
		s.Phase = lockv1.PhaseReleasing
		s.History = []lockv1.Term{{Holder: "me", HolderUID: "uid-me", Token: 60, Acquired: metav1.Now(), Reason: lockv1.ReasonSlotRemoved}}
	})
	h.rec.waitEvents(t, "holder(me,60) start(60) stop")
	if el.Valid() || el.Slot() != -1 || el.Token() != 0 {
		t.Errorf("after Releasing: Valid %v, Slot %d, Token %d; want false, -1, 0", el.Valid(), el.Slot(), el.Token())
	}
	eventually(t, 10*time.Second, func() bool { r, ok := el.Ending(60); return ok && r == lockv1.ReasonSlotRemoved },
		func() string {
			r, ok := el.Ending(60)
			return fmt.Sprintf("Ending(60) = %q, %v; want %q, true", r, ok, lockv1.ReasonSlotRemoved)
		})
}

// TestSlotTokenBelowItsOwnMax: a slot Held by this pod under a token below the slot's own
// maxFencingToken is not led (a later term of the slot was published); a token below another
// slot's max is (TestSlotHolderLeadsItsSlot). The slot's next token is led.
func TestSlotTokenBelowItsOwnMax(t *testing.T) {
	h, terms, cfg := slotHarness(t, 3)
	setSlot(t, h.key, 2, func(s *lockv1.DistributedLockStatus) {
		held("me", "uid-me", 70, 6)(s)
		s.MaxFencingToken = 80
	})
	h.run(t, cfg)
	h.waitReads(t, 3)
	stays(t, h, time.Second, "slot 2 Held under 70 with its max 80")
	setSlot(t, h.key, 2, held("me", "uid-me", 90, 6))
	h.rec.waitEvents(t, "holder(me,70) holder(me,90) start(90)") // OnNewHolder is informational: it reports 70 too
	if got, want := terms.String(), "token 90: SlotOf 2, Slot 2"; got != want {
		t.Errorf("terms = %q, want %q", got, want)
	}
}

// TestSlotMoveIsNewTerm: a pod whose slot 1 term ends and that is granted slot 2 in the same
// status write starts a new term, of slot 2 with its token; the removal of its slot from
// status.slots ends that term too.
func TestSlotMoveIsNewTerm(t *testing.T) {
	h, terms, cfg := slotHarness(t, 3)
	setSlot(t, h.key, 1, held("me", "uid-me", 60, 6))
	el := h.run(t, cfg)
	h.rec.waitEvents(t, "holder(me,60) start(60)")
	setStatus(t, h.key, func(s *lockv1.DistributedLockStatus) {
		v := s.SlotView(1)
		held("other", "uid-other", 95, 6)(&v)
		v.MaxFencingToken = 95
		s.SetSlot(1, v, false)
		w := s.SlotView(2)
		held("me", "uid-me", 90, 6)(&w)
		w.MaxFencingToken = 90
		s.SetSlot(2, w, false)
	})
	h.rec.waitEvents(t, "holder(me,60) start(60) stop holder(me,90) start(90)")
	if got, want := terms.String(), "token 60: SlotOf 1, Slot 1; token 90: SlotOf 2, Slot 2"; got != want {
		t.Errorf("terms = %q, want %q", got, want)
	}
	dropSlot(t, h.key, 2)
	h.rec.waitEvents(t, "holder(me,60) start(60) stop holder(me,90) start(90) stop")
	if el.Valid() || el.Slot() != -1 {
		t.Errorf("after slot 2 was removed: Valid %v, Slot %d; want false, -1", el.Valid(), el.Slot())
	}
}

// TestSlotOneSlotLock: on a one-slot lock Slot() and SlotOf(ctx) are 0, and -1 when not
// leading.
func TestSlotOneSlotLock(t *testing.T) {
	h := newHarness(t, 6)
	terms := &slotTerms{}
	cfg := h.config("me", "uid-me")
	cfg.Callbacks = terms.wrap(&h.el, cfg.Callbacks)
	setStatus(t, h.key, held("me", "uid-me", 33, 6))
	el := h.run(t, cfg)
	h.rec.waitEvents(t, "holder(me,33) start(33)")
	if got, want := terms.String(), "token 33: SlotOf 0, Slot 0"; got != want {
		t.Errorf("terms = %q, want %q", got, want)
	}
	if el.Slot() != 0 {
		t.Errorf("Slot() = %d, want 0", el.Slot())
	}
	setStatus(t, h.key, releasing)
	h.rec.waitEvents(t, "holder(me,33) start(33) stop")
	if el.Slot() != -1 {
		t.Errorf("Slot() after the term = %d, want -1", el.Slot())
	}
}

// TestSlotRelease: the holder of slot 1 releases its term with its pod-bound token: the
// shipped admission policy admits "<uid>/<slot 1's token>", the term stops first, and the
// released token is not led again, by this elector nor by a new one of the same pod.
func TestSlotRelease(t *testing.T) {
	ns := namespace(t)
	key := createLock(t, ns, "leader", 6)
	setSpecSlots(t, key, 3)
	pod, podCfg := podIdentity(t, ns)
	waitPolicy(t, key)
	setStatus(t, key, held("other", "uid-other", 100, 6))
	setSlot(t, key, 1, held(pod.Name, pod.UID, 60, 6))
	w := &slowWorker{t: t, key: key, stopTakes: 300 * time.Millisecond}
	var el *leadership.Elector
	var slot int
	cfg := leadership.Config{Config: podCfg, Namespace: ns, Lock: key.Name, Identity: pod.UID, Name: pod.Name,
		Callbacks: leadership.Callbacks{OnStartedLeading: func(ctx context.Context, token int64) { slot = leadership.SlotOf(ctx); w.run(ctx, token) }}}
	el, err := leadership.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- el.Run(ctx) }()
	eventually(t, 10*time.Second, el.Valid, func() string { return "the pod never led slot 1's token 60" })
	if err := el.Release(t.Context()); err != nil {
		t.Fatalf("Release of slot 1's term = %v, want nil (the policy admits a slot's holder)", err)
	}
	if !w.returned.Load() || slot != 1 {
		t.Errorf("Release returned with OnStartedLeading returned %v, its SlotOf %d; want true, 1", w.returned.Load(), slot)
	}
	want := lockv1.HolderReleaseValue(pod.UID, 60)
	if got := releaseOf(t, key); got != want {
		t.Errorf("after Release: annotation %q, want %q", got, want)
	}
	if v := w.early.Load(); v != nil {
		t.Errorf("the release %v was on the lock while OnStartedLeading still ran", v)
	}
	// No controller here: slot 1 stays Held under 60. Neither this elector nor a new one of the
	// pod (the annotation names its term) leads it again.
	setStatus(t, key, func(s *lockv1.DistributedLockStatus) { s.ObservedGeneration++ })
	el2, err := leadership.New(leadership.Config{Config: podCfg, Namespace: ns, Lock: key.Name, Identity: pod.UID, Name: pod.Name})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx2, cancel2 := context.WithCancel(context.Background())
	done2 := make(chan error, 1)
	go func() { done2 <- el2.Run(ctx2) }()
	deadline := time.Now().Add(1500 * time.Millisecond)
	for time.Now().Before(deadline) {
		if el.Valid() || el2.Valid() {
			t.Fatalf("the released token 60 of slot 1 is led again (elector %v, new elector %v)", el.Valid(), el2.Valid())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel2()
	cancel()
	for _, d := range []chan error{done, done2} {
		if err := <-d; err != nil {
			t.Errorf("Run = %v, want nil", err)
		}
	}
}

// TestResourceLockRefusesSlots: a ResourceLock refuses a lock of spec.slots above 1 at Get,
// Update and Create, with ErrSlotsUnsupported, even while slot 0 names this pod, and its
// readiness says so; on a one-slot lock it never leads a slot above 0 still listed (a shrink
// in progress), and leads slot 0.
func TestResourceLockRefusesSlots(t *testing.T) {
	ns := namespace(t)
	key := createLock(t, ns, "leader", 40)
	setSpecSlots(t, key, 2)
	setStatus(t, key, held("me", "uid-me", 50, 40))
	l, err := leadership.NewResourceLock(leadership.ResourceLockConfig{Config: env.Config, Namespace: ns, Lock: key.Name, Identity: "uid-me", Name: "me"})
	if err != nil {
		t.Fatalf("NewResourceLock: %v", err)
	}
	rec := rlRecord("uid-me")
	if _, _, err := l.Get(t.Context()); !errors.Is(err, leadership.ErrSlotsUnsupported) || !strings.Contains(err.Error(), "spec.slots 2") {
		t.Errorf("Get = %v, want ErrSlotsUnsupported naming spec.slots 2", err)
	}
	if err := l.Update(t.Context(), rec); !errors.Is(err, leadership.ErrSlotsUnsupported) {
		t.Errorf("Update = %v, want ErrSlotsUnsupported", err)
	}
	if err := l.Create(t.Context(), rec); !errors.Is(err, leadership.ErrSlotsUnsupported) {
		t.Errorf("Create = %v, want ErrSlotsUnsupported", err)
	}
	if l.Valid() || l.Token() != 0 {
		t.Errorf("Valid %v, Token %d; want false, 0", l.Valid(), l.Token())
	}
	if err := l.ReadyzCheck(nil); !errors.Is(err, leadership.ErrSlotsUnsupported) {
		t.Errorf("ReadyzCheck = %v, want ErrSlotsUnsupported", err)
	}

	// Shrunk to one slot, slot 1 still listed and Held by this pod: not led.
	setSpecSlots(t, key, 1)
	setStatus(t, key, held("other", "uid-other", 70, 40))
	setSlot(t, key, 1, held("me", "uid-me", 60, 40))
	if err := l.Update(t.Context(), rec); !errors.Is(err, leadership.ErrNotGranted) {
		t.Errorf("Update with slot 1 held by this pod on a one-slot lock = %v, want ErrNotGranted", err)
	}
	if err := l.ReadyzCheck(nil); err != nil {
		t.Errorf("ReadyzCheck on a one-slot lock = %v, want nil", err)
	}
	// Slot 0 is led as on any one-slot lock.
	setStatus(t, key, held("me", "uid-me", 80, 40))
	if err := l.Update(t.Context(), rec); err != nil || l.Token() != 80 {
		t.Errorf("Update with slot 0 held by this pod = %v, Token %d; want nil, 80", err, l.Token())
	}
}

// rlRecord is the election record client-go's Update sends for uid under controller-runtime's
// default LeaseDuration.
func rlRecord(uid string) resourcelock.LeaderElectionRecord {
	return resourcelock.LeaderElectionRecord{HolderIdentity: uid, LeaseDurationSeconds: int(leadership.DefaultLeaseDuration / time.Second)}
}
