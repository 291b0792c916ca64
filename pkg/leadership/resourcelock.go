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
	DefaultLeaseDuration = 15 * time.Second
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
	// LeaseDuration, RenewDeadline and RetryPeriod are the manager's leader election timings
	// (manager.Options LeaseDuration, RenewDeadline and RetryPeriod); zero means
	// DefaultLeaseDuration, DefaultRenewDeadline and DefaultRetryPeriod, controller-runtime's
	// defaults. NewResourceLock checks them as client-go does (LeaseDuration > RenewDeadline >
	// 1.2 x RetryPeriod); renewals are judged by them only with ExactTimings.
	LeaseDuration              time.Duration
	RenewDeadline, RetryPeriod time.Duration
	// ExactTimings declares that the manager runs with exactly LeaseDuration, RenewDeadline and
	// RetryPeriod (crmanager.Options sets both sides and this). A renewal then succeeds only
	// while more than RenewDeadline + RetryPeriod of the term's validity is left, because
	// client-go goes on leading for up to that long after a renewal. The lock checks what
	// client-go shows of the timings: an Update whose record carries another LeaseDuration is
	// refused; a renewal round whose context shows a longer RenewDeadline, or that starts
	// longer after the previous round's renewal than RetryPeriod, makes later renewals assume
	// the longer, and ReadyzCheck fails from then on (the term in progress is not protected from
	// a manager given longer timings than declared). With controller-runtime's defaults on a
	// 15 s lock a renewal's read may take at most about 1 s (13 s of validity, 12 s needed); a
	// slower one is refused as late and client-go retries within RenewDeadline.
	//
	// Without ExactTimings (the default: the manager's timings are unknown, as with a bare
	// LeaderElectionResourceLockInterface option) a renewal must leave more validity than the
	// most client-go can lead after it under the LeaseDuration its Update records carry:
	// RenewDeadline is below LeaseDuration and RetryPeriod below RenewDeadline/1.2 (client-go
	// refuses other timings), so 11/6 of LeaseDuration, taken as one second more than the whole
	// seconds the record carries (client-go rounds it down). With controller-runtime's default
	// 15 s that needs spec.leaseDurationSeconds 32 or more; a shorter lock needs ExactTimings or
	// a shorter manager LeaseDuration.
	ExactTimings bool
	// ReleaseOnStop makes RunManager release the term on a clean stop: it confirms the end of
	// the term to the controller (the holder-release annotation, see Elector.Release), so that
	// the next candidate is granted at once instead of after the lock delay, when its context
	// ended, the manager's Start returned nil and client-go stopped leading because the
	// manager stopped it, its newest read confirming the term, not because a renewal failed
	// (see Release). The release then promises that controller-runtime waited for every
	// runnable to return, which it does only within a GracefulShutdownTimeout that is not 0: a
	// manager with 0 returns from Start at once, before its runnables, and its nil proves
	// nothing. The lock cannot see the manager's options, so the release is off (false) for a
	// lock made by NewResourceLock: set ReleaseOnStop only for a manager whose
	// GracefulShutdownTimeout is unset (controller-runtime's 30 s), positive, or negative
	// (no bound). crmanager.Options, which sees both sides, sets it for such a manager unless
	// DisableReleaseOnStop. Without the release the controller ends the term after the lock
	// delay, or at once when the kubelet reports the pod's containers terminated.
	ReleaseOnStop bool
	// DisableReleaseOnStop turns the release off: crmanager.Options then leaves ReleaseOnStop
	// false, and it overrides a ReleaseOnStop set by hand. Default false.
	DisableReleaseOnStop bool
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
// RunManager runs several one after another, and releases the term on a clean stop.
type ResourceLock struct {
	e   *Elector // never Run: its client, config, clock and releases
	cfg ResourceLockConfig
	// led is the term the newest successful Update confirmed; nil after a failed one.
	led atomic.Pointer[termView]
	// renewSeen is the longest RenewDeadline client-go's contexts have shown, retrySeen the
	// longest of the recent gaps between a renewal and the next round (RetryPeriod as client-go
	// waits it), both in nanoseconds (0: none seen).
	renewSeen, retrySeen atomic.Int64
	// leaseSeen is the LeaseDuration (seconds) the newest Update's record carried; 0: none.
	leaseSeen atomic.Int64
	// renewing is true between client-go's "became leader" and "stopped leading" events: its
	// contexts are then renewal rounds'. claimed is set by a successful Update and cleared by
	// "stopped leading": client-go may lead. lastOK is the wall time of the newest successful
	// Update; readOK says whether the newest read (Get's or Update's) confirmed the term;
	// cleanStop whether every manager that led with the lock stopped leading with its newest
	// read confirming the term (it was stopped, not refused); true before any led.
	renewing, claimed, readOK, cleanStop atomic.Bool
	lastOK                               atomic.Pointer[time.Time]
	// rw serialises Update and Release, so that no Update confirms a term a Release is
	// releasing, and no Release releases a term an Update just confirmed.
	rw sync.Mutex
	// notBefore is the instant before which no term is confirmed (RunManager's wait for a
	// lost term's validity); 0 when none.
	notBefore atomic.Int64
	// campaigning is set by the first Get or Update: ReadyzCheck judges reads from then on.
	campaigning atomic.Bool

	mu       sync.Mutex
	last     *termView       // the newest term ever confirmed (kept after it ends), guarded by mu
	lastRead instant         // send time of the newest successful read, guarded by mu
	readErr  error           // why the newest read failed; nil after a success, guarded by mu
	refused  error           // why the newest grant to this pod was refused, guarded by mu
	mismatch error           // the manager's timings differ from the configured ones, guarded by mu
	gaps     []time.Duration // the recent gaps between renewal rounds, guarded by mu
	limit    time.Duration
	global   globalReads // a Global lock's consistent reads (global_reads.go), guarded by mu
}

var _ resourcelock.Interface = (*ResourceLock)(nil)

// NewResourceLock checks cfg, fills its defaults and returns a ResourceLock. An invalid cfg
// gives an error wrapping ErrInvalidConfig that names the field.
func NewResourceLock(cfg ResourceLockConfig) (*ResourceLock, error) {
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = DefaultRenewDeadline
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = DefaultRetryPeriod
	}
	switch {
	case cfg.LeaseDuration < time.Second:
		return nil, invalid("LeaseDuration", fmt.Sprintf("%v is below 1s", cfg.LeaseDuration))
	case cfg.LeaseDuration <= cfg.RenewDeadline:
		return nil, invalid("LeaseDuration", fmt.Sprintf("%v is not longer than RenewDeadline %v (client-go refuses it)", cfg.LeaseDuration, cfg.RenewDeadline))
	case cfg.RenewDeadline < 0:
		return nil, invalid("RenewDeadline", fmt.Sprintf("%v is negative", cfg.RenewDeadline))
	case cfg.RetryPeriod < 0:
		return nil, invalid("RetryPeriod", fmt.Sprintf("%v is negative", cfg.RetryPeriod))
	case cfg.RetryPeriod < time.Millisecond:
		return nil, invalid("RetryPeriod", fmt.Sprintf("%v is below 1ms", cfg.RetryPeriod))
	case float64(cfg.RenewDeadline) <= 1.2*float64(cfg.RetryPeriod):
		return nil, invalid("RenewDeadline", fmt.Sprintf("%v is not longer than 1.2 x RetryPeriod %v (client-go refuses it)", cfg.RenewDeadline, cfg.RetryPeriod))
	}
	e, err := New(Config{Config: cfg.Config, Namespace: cfg.Namespace, Lock: cfg.Lock, Identity: cfg.Identity, Name: cfg.Name,
		Margin: cfg.Margin, ReleaseTimeout: cfg.ReleaseTimeout, Log: cfg.Log})
	if err != nil {
		return nil, err
	}
	cfg.Identity, cfg.Name = e.cfg.Identity, e.cfg.Name
	l := &ResourceLock{e: e, cfg: cfg, limit: readLimit(&e.cfg, defaultLease)}
	l.cleanStop.Store(true) // no leader-election runnable has run
	return l, nil
}

// ReleasesOnStop reports whether RunManager releases the term on a clean stop:
// ResourceLockConfig.ReleaseOnStop and not DisableReleaseOnStop. False for a lock made by
// NewResourceLock unless the caller opted in; crmanager.Options turns it on for a manager
// whose GracefulShutdownTimeout is not 0.
func (l *ResourceLock) ReleasesOnStop() bool {
	return l.cfg.ReleaseOnStop && !l.cfg.DisableReleaseOnStop
}

// Identity returns this pod's UID: client-go's identity of the candidate.
func (l *ResourceLock) Identity() string { return string(l.cfg.Identity) }

// Describe names the lock, for client-go's logs.
func (l *ResourceLock) Describe() string {
	return "distributedlock " + l.cfg.Namespace + "/" + l.cfg.Lock
}

// RecordEvent takes client-go's leadership events: "became leader" and "stopped leading"
// bracket its renewal loop. Each is logged.
func (l *ResourceLock) RecordEvent(s string) {
	switch s {
	case "became leader":
		l.e.setWriter(l.e.drawWriter()) // a term's work starts: a writer of its own
		l.cleanStop.Store(false)
		l.renewing.Store(true)
	case "stopped leading":
		l.cleanStop.Store(l.renewing.Load() && l.readOK.Load())
		l.renewing.Store(false)
		l.claimed.Store(false)
	}
	l.e.log().Info("leader election: "+s, "token", l.Token())
}

// Create always fails: lockwarden's candidates never create their lock. For a lock that
// exists with spec.slots above 1 (client-go calls Create only after a Get that found none) its
// error wraps ErrSlotsUnsupported.
func (l *ResourceLock) Create(ctx context.Context, _ resourcelock.LeaderElectionRecord) error {
	rctx, cancel := context.WithTimeout(ctx, maxReadTimeout)
	lock, err := l.e.get(rctx)
	cancel()
	if err == nil {
		if err := slotsRefused(lock, l.Describe()); err != nil {
			return err
		}
	}
	return fmt.Errorf("leadership: %s does not exist; declare it (kind DistributedLock): a candidate never creates its lock", l.Describe())
}

// Valid reports whether the term the newest successful Update confirmed is still valid. It
// reads the clock itself. Check it right before each write.
func (l *ResourceLock) Valid() bool {
	v := l.led.Load()
	return v != nil && now() < v.deadline && v.token > l.e.abandoned.load(v.lin)
}

// Token returns the confirmed term's fencing token while Valid() is true, else 0.
func (l *ResourceLock) Token() int64 {
	v := l.led.Load()
	if v == nil || now() >= v.deadline || v.token <= l.e.abandoned.load(v.lin) {
		return 0
	}
	return v.token
}

// Writer returns the writer ID to present with Token() to fenced resources, as
// Elector.Writer: "<Identity>/<incarnation>", with an incarnation drawn each time client-go
// becomes leader with the lock (its "became leader" event, before the manager starts its
// leader-election runnables), the first time the process's own. A manager that leads again
// (RunManager after a lost lock, or a term led again with the same token) presents another
// writer than the one before, whose writes may still be on their way, so a resource that
// fenced the token for the earlier writer refuses it: Abandon it then. Read it in each
// reconcile, next to Token(); it changes only when client-go becomes leader again.
func (l *ResourceLock) Writer() string { return l.e.Writer() }

// Abandon ends this process's term of token for good, without a release, as Elector.Abandon:
// call it when a resource refused token from Writer() because another writer presented it
// first. Valid() is false for it from the call on; Update confirms it no more (so client-go
// stops leading at its next renewal), Release never releases it, and ReadyzCheck fails,
// wrapping ErrAbandoned, while the lock still names this pod with it.
func (l *ResourceLock) Abandon(token int64) {
	l.e.Abandon(token)
	if v := l.led.Load(); v != nil && v.token <= l.e.abandoned.load(v.lin) {
		l.led.CompareAndSwap(v, nil)
	}
}

// ValidUntil returns the confirmed term's validity deadline, or the zero Time when no term
// is confirmed (the newest Update failed).
func (l *ResourceLock) ValidUntil() time.Time {
	v := l.led.Load()
	if v == nil || v.token <= l.e.abandoned.load(v.lin) {
		return time.Time{}
	}
	return v.deadline.Wall()
}

// ReadyzCheck is a readiness check (the shape of controller-runtime's healthz.Checker): it
// fails before a manager started campaigning with the lock (controller-runtime campaigns
// once its caches synced); when no consistent read of the lock succeeded for longer than termLeaseSeconds -
// margin (reads happen while a manager runs, every RetryPeriod); once client-go's contexts
// showed a RenewDeadline longer than configured (for good: fix the configuration); and while
// the lock is granted to this pod under a term the manager's timings refuse. It never depends
// on holding the lock.
func (l *ResourceLock) ReadyzCheck(*http.Request) error {
	t := now()
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.mismatch != nil:
		return l.mismatch
	case !l.campaigning.Load():
		return errors.New("leadership: not campaigning yet: no manager has started its leader election with this lock")
	case t.Sub(l.lastRead) > l.limit:
		return fmt.Errorf("leadership: no consistent read of %s for %v (limit %v): %w",
			l.Describe(), t.Sub(l.lastRead).Round(time.Millisecond), l.limit, errOrUnknown(l.readErr))
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

// errIgnoredRelease is logged when client-go asks to release (ReleaseOnCancel).
var errIgnoredRelease = errors.New("client-go's release is ignored: it is sent before controller-runtime stops the controllers of a lost lease; RunManager releases after they stopped")
