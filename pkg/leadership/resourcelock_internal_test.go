package leadership

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

func heldLock(uid string, token int64, lease int32) *lockv1.DistributedLock {
	return &lockv1.DistributedLock{
		ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: "ns"},
		Status: lockv1.DistributedLockStatus{Phase: lockv1.PhaseHeld, Holder: "pod-" + uid, HolderUID: types.UID("uid-" + uid),
			FencingToken: token, MaxFencingToken: token, TermLeaseSeconds: lease},
	}
}

func TestDecideRenewal(t *testing.T) {
	crDefaults := timings{renewDeadline: 10 * time.Second, retryPeriod: 2 * time.Second}
	const sec = time.Second
	sent := instant(100 * sec)
	cases := []struct {
		name    string
		lock    *lockv1.DistributedLock
		g       grant
		refused error
		margin  time.Duration
		t       timings
		done    instant
		want    error // nil: renewed until sent + lease - margin
	}{
		{"granted, read fast", heldLock("a", 7, 15), grantLead, nil, 2 * sec, crDefaults, sent.Add(50 * time.Millisecond), nil},
		{"granted, read took 900ms: 12.1s left", heldLock("a", 7, 15), grantLead, nil, 2 * sec, crDefaults, sent.Add(900 * time.Millisecond), nil},
		{"granted, read took 1.5s: 11.5s left < 12s", heldLock("a", 7, 15), grantLead, nil, 2 * sec, crDefaults, sent.Add(1500 * time.Millisecond), errConfirmedLate},
		{"lease 12s cannot cover 10s+2s after a 2s margin", heldLock("a", 7, 12), grantLead, nil, 2 * sec, crDefaults, sent, ErrTimingsRefused},
		{"lease 14s leaves exactly 12s: refused (not more than)", heldLock("a", 7, 14), grantLead, nil, 2 * sec, crDefaults, sent, ErrTimingsRefused},
		{"short timings on a short lease", heldLock("a", 7, 8), grantLead, nil, 2 * sec, timings{renewDeadline: 3 * sec, retryPeriod: sec}, sent.Add(time.Second), nil},
		{"margin refused", heldLock("a", 7, 15), grantLead, errors.New("margin"), 2 * sec, crDefaults, sent, nil},
		{"another holder", heldLock("b", 7, 15), grantNone, nil, 2 * sec, crDefaults, sent, ErrNotGranted},
		{"released token", heldLock("a", 7, 15), grantReleased, nil, 2 * sec, crDefaults, sent, ErrNotGranted},
		{"release lost", heldLock("a", 7, 15), grantResend, nil, 2 * sec, crDefaults, sent, ErrNotGranted},
		{"no lock", nil, grantNone, nil, 2 * sec, crDefaults, sent, ErrNotGranted},
		// Without ExactTimings, a record's LeaseDuration of 15 s bounds RenewDeadline below 16 s
		// and RetryPeriod below 16/1.2 s: 29.33 s of belief.
		{"unknown timings: a 32 s lease leaves 30 s", heldLock("a", 7, 32), grantLead, nil, 2 * sec, timings{16 * sec, 16 * sec * 5 / 6, true}, sent.Add(100 * time.Millisecond), nil},
		{"unknown timings: a 31 s lease leaves 29 s", heldLock("a", 7, 31), grantLead, nil, 2 * sec, timings{16 * sec, 16 * sec * 5 / 6, true}, sent, ErrTimingsRefused},
		{"unknown timings: the default 15 s lease", heldLock("a", 7, 15), grantLead, nil, 2 * sec, timings{16 * sec, 16 * sec * 5 / 6, true}, sent, ErrTimingsRefused},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := decideRenewal(c.lock, c.g, c.refused, c.margin, c.t, sent, c.done, 0)
			switch {
			case c.refused != nil:
				if !errors.Is(r.err, c.refused) {
					t.Fatalf("err = %v, want the refusal %v", r.err, c.refused)
				}
			case c.want == nil:
				lease := time.Duration(c.lock.Status.TermLeaseSeconds) * time.Second
				if r.err != nil || r.token != c.lock.Status.FencingToken || r.deadline != sent.Add(lease-c.margin) {
					t.Fatalf("renewal = %+v, want token %d until sent+%v", r, c.lock.Status.FencingToken, lease-c.margin)
				}
			default:
				if !errors.Is(r.err, c.want) || r.deadline != 0 || r.token != 0 {
					t.Fatalf("renewal = %+v, want error %v and no term", r, c.want)
				}
			}
		})
	}
}

// TestRecord checks what client-go sees: only a grant this pod may lead names it; anything
// else names a holder, so that client-go waits instead of calling Update.
// TestRemedy checks the lease the refusal message asks for: the smallest that fits.
func TestRemedy(t *testing.T) {
	const sec = time.Second
	for _, c := range []struct {
		t    timings
		want string
	}{
		{timings{10 * sec, 2 * sec, false}, "set spec.leaseDurationSeconds to 15 or more"},
		{timings{16 * sec, 16 * sec * 5 / 6, true}, "set spec.leaseDurationSeconds to 32 or more, or declare the manager's exact timings"},
		{timings{3000 * sec, 600 * sec, false}, "no lease up to the API's maximum fits"},
	} {
		got := remedy(c.t, DefaultMargin(c.t.belief()))
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("remedy(%v) = %q, want it to start %q", c.t, got, c.want)
		}
	}
}

func TestRecord(t *testing.T) {
	me := "uid-a"
	releasing := heldLock("a", 7, 15)
	releasing.Status.Phase = lockv1.PhaseReleasing
	pending := heldLock("a", 0, 15)
	pending.Status = lockv1.DistributedLockStatus{}
	pending.Spec.LeaseDurationSeconds = 9
	cases := []struct {
		name    string
		lock    *lockv1.DistributedLock
		granted bool
		holder  string
		lease   int
	}{
		{"granted", heldLock("a", 7, 15), true, me, 15},
		{"mine but refused", heldLock("a", 7, 15), false, "lockwarden:Held", 15},
		{"another holder", heldLock("b", 7, 15), true, "uid-b", 15},
		{"releasing", releasing, true, "lockwarden:Releasing", 15},
		{"no status yet", pending, true, "lockwarden:Pending", 9},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := record(c.lock, me, c.granted)
			if r.HolderIdentity != c.holder || r.LeaseDurationSeconds != c.lease || time.Since(r.RenewTime.Time) > time.Minute {
				t.Fatalf("record = %+v, want holder %q lease %d renewed now", r, c.holder, c.lease)
			}
		})
	}
}

type startFunc func(context.Context) error

func (f startFunc) Start(ctx context.Context) error { return f(ctx) }

// TestBuildManagerRetries: after a lost lock a failing build (the lost manager's ports still
// bound) is retried; the first build's failure is returned at once.
func TestBuildManagerRetries(t *testing.T) {
	l, err := NewResourceLock(ResourceLockConfig{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "ns", Lock: "op", Identity: "uid-a"})
	if err != nil {
		t.Fatal(err)
	}
	failures := 0
	build := func() (Manager, error) {
		if failures < 2 {
			failures++
			return nil, errors.New("listen tcp :8081: bind: address already in use")
		}
		return startFunc(func(context.Context) error { return nil }), nil
	}
	if _, err := buildManager(t.Context(), l, build, false); err == nil || failures != 1 {
		t.Fatalf("first build: err = %v after %d tries, want the error after 1", err, failures)
	}
	failures = 0
	if m, err := buildManager(t.Context(), l, build, true); err != nil || m == nil || failures != 2 {
		t.Fatalf("rebuild: %v, %v after %d failures, want a manager after 2", m, err, failures)
	}
}
