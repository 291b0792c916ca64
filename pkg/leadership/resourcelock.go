package leadership

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// The defaults of ResourceLockConfig's timings: controller-runtime's manager defaults.
const (
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// ResourceLockConfig configures a ResourceLock. Every field states its default.
type ResourceLockConfig struct {
	// Config reaches the API server, as Config.Config does for an Elector (get and watch on
	// distributedlocks, patch to release). Required.
	Config *rest.Config
	// Namespace and Lock name the DistributedLock. Required.
	Namespace, Lock string
	// Identity is this pod's UID; defaults to $POD_UID. Name is its name, for logs; defaults to
	// $POD_NAME.
	Identity types.UID
	Name     string
	// Margin is subtracted from every term's validity, as Config.Margin. Zero means
	// DefaultMargin(termLeaseSeconds).
	Margin time.Duration
	// RenewDeadline and RetryPeriod must equal the manager's (manager.Options RenewDeadline and
	// RetryPeriod): a renewal succeeds only while more than RenewDeadline + RetryPeriod of the
	// term's validity is left, so that client-go, which goes on leading for up to that long
	// after a renewal, stops within the validity. Zero means DefaultRenewDeadline and
	// DefaultRetryPeriod, controller-runtime's defaults. The lock checks RenewDeadline against
	// the deadline client-go puts on each renewal's context and uses the longer of the two.
	RenewDeadline, RetryPeriod time.Duration
	// ReleaseOnStop makes RunManager confirm the end of the term to the controller (the
	// holder-release annotation, see Elector.Release) when its context ended and the manager's
	// Start returned nil, that is after every runnable returned (default false). Leave it off
	// when the manager's GracefulShutdownTimeout is 0: Start then returns without waiting.
	ReleaseOnStop bool
	// ReleaseTimeout bounds a release request, as Config.ReleaseTimeout.
	ReleaseTimeout time.Duration
	// Log receives refusals and releases. The zero Logger discards.
	Log logr.Logger
}

// ResourceLock is a client-go resourcelock.Interface backed by a DistributedLock: give it to
// controller-runtime as manager.Options.LeaderElectionResourceLockInterface (with
// LeaderElection: true) and the manager runs its controllers only while lockwarden's
// controller grants this pod the lock. It writes nothing to the lock: its Get and Update are
// consistent reads (GET with resourceVersion unset, send time taken first) judged as
// pkg/leadership judges them, and Update succeeds only when the read shows this pod as holder,
// phase Held, under a token it has not released, with more than RenewDeadline + RetryPeriod
// of the term's validity left. Create always fails: declare the lock in YAML. Token, Valid
// and ValidUntil give the term to the controllers, which should send the token with each
// write (see pkg/fence) and check Valid right before it. A lock serves one manager at a time;
// RunManager runs several one after another.
type ResourceLock struct {
	e   *Elector // never Run: its client, config, clock and releases
	cfg ResourceLockConfig
	// led is the term the newest successful Update confirmed; nil after a failed one.
	led atomic.Pointer[termView]
	// renewSeen is the longest RenewDeadline client-go's contexts have shown (nanoseconds).
	renewSeen atomic.Int64

	mu       sync.Mutex
	last     *termView // the newest term ever confirmed (kept after it ends), guarded by mu
	lastRead instant   // send time of the newest successful read, guarded by mu
	readErr  error     // why the newest read failed; nil after a success, guarded by mu
	refused  error     // why the newest grant to this pod was refused, guarded by mu
	mismatch error     // the manager's RenewDeadline is longer than configured, guarded by mu
	limit    time.Duration
}

var _ resourcelock.Interface = (*ResourceLock)(nil)

// NewResourceLock checks cfg, fills its defaults and returns a ResourceLock. An invalid cfg
// gives an error wrapping ErrInvalidConfig that names the field.
func NewResourceLock(cfg ResourceLockConfig) (*ResourceLock, error) {
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = DefaultRenewDeadline
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	switch {
	case cfg.RenewDeadline < 0:
		return nil, invalid("RenewDeadline", fmt.Sprintf("%v is negative", cfg.RenewDeadline))
	case cfg.RetryPeriod < 0:
		return nil, invalid("RetryPeriod", fmt.Sprintf("%v is negative", cfg.RetryPeriod))
	case cfg.RenewDeadline <= cfg.RetryPeriod:
		return nil, invalid("RenewDeadline", fmt.Sprintf("%v is not longer than RetryPeriod %v (client-go refuses it)", cfg.RenewDeadline, cfg.RetryPeriod))
	}
	e, err := New(Config{Config: cfg.Config, Namespace: cfg.Namespace, Lock: cfg.Lock, Identity: cfg.Identity, Name: cfg.Name,
		Margin: cfg.Margin, ReleaseTimeout: cfg.ReleaseTimeout, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	cfg.Identity, cfg.Name = e.cfg.Identity, e.cfg.Name
	l := &ResourceLock{e: e, cfg: cfg, lastRead: now(), limit: readLimit(&e.cfg, defaultLease)}
	return l, nil
}

// Identity returns this pod's UID: client-go's identity of the candidate.
func (l *ResourceLock) Identity() string { return string(l.cfg.Identity) }

// Describe names the lock, for client-go's logs.
func (l *ResourceLock) Describe() string {
	return "distributedlock " + l.cfg.Namespace + "/" + l.cfg.Lock
}

// RecordEvent logs client-go's leadership events ("became leader", "stopped leading").
func (l *ResourceLock) RecordEvent(s string) {
	l.e.log().Info("leader election: "+s, "token", l.Token())
}

// Create always fails: lockwarden's candidates never create their lock.
func (l *ResourceLock) Create(context.Context, resourcelock.LeaderElectionRecord) error {
	return fmt.Errorf("leadership: %s does not exist; declare it (kind DistributedLock): a candidate never creates its lock", l.Describe())
}

// Valid reports whether the term the newest successful Update confirmed is still valid. It
// reads the clock itself. Check it right before each write.
func (l *ResourceLock) Valid() bool {
	v := l.led.Load()
	return v != nil && now() < v.deadline
}

// Token returns the confirmed term's fencing token while Valid() is true, else 0.
func (l *ResourceLock) Token() int64 {
	v := l.led.Load()
	if v == nil || now() >= v.deadline {
		return 0
	}
	return v.token
}

// ValidUntil returns the confirmed term's validity deadline, or the zero Time when no term
// is confirmed (the newest Update failed).
func (l *ResourceLock) ValidUntil() time.Time {
	v := l.led.Load()
	if v == nil {
		return time.Time{}
	}
	return v.deadline.wall()
}

// ReadyzCheck is a readiness check (the shape of controller-runtime's healthz.Checker): it
// fails when no consistent read of the lock succeeded for longer than termLeaseSeconds -
// margin (reads happen while a manager runs, every RetryPeriod); once client-go's contexts
// showed a RenewDeadline longer than configured (for good: fix the configuration); and while
// the lock is granted to this pod under a term the manager's timings refuse. It never depends
// on holding the lock.
func (l *ResourceLock) ReadyzCheck(*http.Request) error {
	t := now()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case t.sub(l.lastRead) > l.limit:
		return fmt.Errorf("leadership: no consistent read of %s for %v (limit %v): %w",
			l.Describe(), t.sub(l.lastRead).Round(time.Millisecond), l.limit, errOrUnknown(l.readErr))
	case l.mismatch != nil:
		return l.mismatch
	case l.refused != nil:
		return l.refused
	}
	return nil
}

// lastTerm returns the newest term ever confirmed, nil when none.
func (l *ResourceLock) lastTerm() *termView {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// timings returns the manager's timings: the configured ones, with RenewDeadline raised to
// the longest client-go's contexts have shown.
func (l *ResourceLock) timings() timings {
	return timings{renewDeadline: max(l.cfg.RenewDeadline, time.Duration(l.renewSeen.Load())), retryPeriod: l.cfg.RetryPeriod}
}

// noteDeadline records the renewal deadline ctx carries while a term is confirmed (client-go
// renews under a context of RenewDeadline from the start of the round, so what is left of it
// is at least a lower bound of RenewDeadline; acquiring runs under the caller's context, which
// says nothing). A RenewDeadline longer than configured is an error ReadyzCheck reports.
func (l *ResourceLock) noteDeadline(ctx context.Context) {
	dl, ok := ctx.Deadline()
	if !ok || l.led.Load() == nil {
		return
	}
	left := time.Until(dl)
	for {
		seen := l.renewSeen.Load()
		if int64(left) <= seen {
			return
		}
		if l.renewSeen.CompareAndSwap(seen, int64(left)) {
			break
		}
	}
	if left <= l.cfg.RenewDeadline+l.cfg.RetryPeriod/2 {
		return
	}
	err := fmt.Errorf("%w: the manager's RenewDeadline is at least %v, longer than ResourceLockConfig.RenewDeadline %v: set them equal (renewals now assume the longer)",
		ErrTimingsRefused, left.Round(time.Millisecond), l.cfg.RenewDeadline)
	l.mu.Lock()
	first := l.mismatch == nil
	l.mismatch = err
	l.mu.Unlock()
	if first {
		l.e.log().Info(err.Error())
	}
}

// errIgnoredRelease is logged when client-go asks to release (ReleaseOnCancel).
var errIgnoredRelease = errors.New("client-go's release is ignored: it is sent before controller-runtime stops the controllers of a lost lease; use RunManager with ReleaseOnStop")
