package leadership

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
)

// Defaults and limits.
const (
	// DefaultStopBudget is Config.StopBudget when unset.
	DefaultStopBudget = 5 * time.Second

	// DefaultReleaseTimeout is Config.ReleaseTimeout when unset.
	DefaultReleaseTimeout = 5 * time.Second

	// DefaultLivenessTimeout is Config.LivenessTimeout when unset.
	DefaultLivenessTimeout = 20 * time.Second

	// minDefaultMargin is the smallest default margin of a term (unless L/4 is smaller).
	minDefaultMargin = 2 * time.Second
)

// ErrInvalidConfig is wrapped by every error New returns for a Config it refuses; the message
// names the field.
var ErrInvalidConfig = errors.New("leadership: invalid config")

// Config configures an Elector. Every field states its default.
type Config struct {
	// Config reaches the API server. The elector needs get and watch on distributedlocks in
	// Namespace (grant get, list and watch), and patch to send releases (ClusterRole
	// lockwarden-lock-reader grants all four). Required. It is copied; the elector always asks
	// for JSON. A release is admitted only from the pod's own service-account token (the
	// in-cluster config of a pod with a projected token).
	Config *rest.Config

	// Namespace is the DistributedLock's namespace. Required.
	Namespace string

	// Lock is the DistributedLock's name. Required.
	Lock string

	// Identity is this pod's UID: the pod leads only while the lock's status.holderUID equals
	// it (status.globalHolderUID for a lock of scope Global). Defaults to $POD_UID (set it from the downward API, fieldRef metadata.uid). Required:
	// New fails when both are empty. A pod name is never an identity: a pod deleted and created
	// again under the same name has a new UID and is not the holder.
	Identity types.UID

	// Name is this pod's name, for logs only. Defaults to $POD_NAME.
	Name string

	// Margin is subtracted from every deadline: a term confirmed by a read sent at S ends at
	// S + termLeaseSeconds - Margin. Zero means DefaultMargin(termLeaseSeconds) for each term.
	// A term whose termLeaseSeconds is not more than twice Margin is refused: the pod does not
	// lead it and its ReadyzCheck fails while that grant stands. Must not be negative.
	Margin time.Duration

	// StopBudget is how long, after leadership ends, OnStartedLeading may take to return and
	// OnStoppedLeading to run: past it ReadyzCheck fails until OnStoppedLeading has returned.
	// Zero means DefaultStopBudget. Must not be negative.
	StopBudget time.Duration

	// ReleaseOnStop makes the elector confirm the end of its terms by itself (default false).
	// Set it only when OnStartedLeading does the term's work and returns once that work has
	// stopped. Then, when a term ends while the newest accepted observation still names this
	// pod with that token, Held or Releasing (the controller began ending it, or Run's context
	// ended), the elector waits until OnStartedLeading has returned and OnStoppedLeading has
	// run, then sends the release (see Release): the controller grants the next candidate at
	// once instead of after the lock delay. It is never sent for a term whose
	// OnStartedLeading returned before the term ended (its work may go on elsewhere: a
	// callback that only starts work), nor for a term that ended because its deadline passed
	// or another holder, token or no lock was seen. It is off by default because the
	// Callbacks contract lets OnStartedLeading return at once while work continues, and a
	// release is a promise that nothing acts under the token any more. Release works either
	// way. The package documentation says how to tell whether a callback qualifies; without
	// the release the next holder waits for the lock delay or the kubelet's report that the
	// pod's containers terminated, nothing else. A term this process abandoned (Abandon) is
	// never released.
	//
	// The check "OnStartedLeading ran until the term ended" is made when the callback returns:
	// it ran to the end if the term's context was already cancelled then. It can misfire for
	// a callback that only starts work and returns at once (a sidecar-style callback) when the
	// term happens to end just before it returns: the elector then takes it for a callback
	// that ran the term and sends the release while the work it started may still run. Do not
	// set ReleaseOnStop for such callbacks; the check is a guard, not a proof.
	ReleaseOnStop bool

	// ReleaseTimeout bounds each release request. Zero means DefaultReleaseTimeout. Run's
	// return waits for a release due at shutdown for at most this long. Must not be negative.
	ReleaseTimeout time.Duration

	// SingleTerm gives Run client-go's callback contract (default false; RunOrDie sets it).
	// With it, Run returns once its first term has ended: the term's OnStartedLeading has
	// returned, OnStoppedLeading has run and any release due has been sent (see
	// ReleaseOnStop, Release); or, as always, when its context ends. OnStartedLeading is
	// called at most once per Run, and OnStoppedLeading exactly once when Run ends, whether
	// or not a term started (client-go defers it in Run): do not assume it follows
	// OnStartedLeading. A new token for this pod ends the first term and Run returns; it is
	// not led. A term that starts and ends while an OnNewHolder call still runs (so its
	// OnStartedLeading was never called) does not count: Run goes on to the next term, and
	// Valid() was true during the skipped one, as without SingleTerm. Without SingleTerm, Run
	// leads term after term until its context ends, and OnStoppedLeading follows only terms
	// whose OnStartedLeading was called.
	SingleTerm bool

	// LivenessTimeout is how long, beyond StopBudget, the callbacks of an ended term may
	// still be running before LivezCheck fails. Zero means DefaultLivenessTimeout. Must not be
	// negative.
	LivenessTimeout time.Duration

	// Log receives term changes (Info) and failed reads (V(1)). The zero Logger discards.
	Log logr.Logger

	// Callbacks are told about terms and holders; all are optional.
	Callbacks Callbacks
}

// Callbacks are called one at a time, in the order of the events they report, from one
// goroutine the Elector owns: a callback never runs concurrently with another, so a slow
// callback delays the ones after it (never the elector's decisions; Valid() is always current).
type Callbacks struct {
	// OnStartedLeading is called when a term starts, with the term's fencing token. ctx is
	// cancelled as soon as the term ends (a deadline passed without a confirming read, or an
	// observation shows another holder, phase or token, or Run's context ended). It may return
	// at once or run for the whole term; it must return soon after ctx is cancelled. A ctx
	// cancellation can be observed late after a pause: check Valid() right before each write
	// and carry the token to the resource. A term that ends before its OnStartedLeading could
	// be called (earlier callbacks were still running) gets neither this call nor
	// OnStoppedLeading. With Config.SingleTerm it is called at most once per Run.
	OnStartedLeading func(ctx context.Context, token int64)

	// OnStoppedLeading is called after a term ends and its OnStartedLeading has returned. Both
	// must complete within Config.StopBudget of the end of the term, or ReadyzCheck fails until
	// they do (and LivezCheck once Config.LivenessTimeout more has passed). Run returns only
	// after it has returned. With Config.SingleTerm it is called exactly once per Run, when Run
	// ends, also when no term started.
	OnStoppedLeading func()

	// OnNewHolder is called when an accepted observation (a read or a watch event) shows a
	// holder and token other than the last one reported, with phase Held; this pod included.
	// It is informational: it may come from a watch event no read has confirmed. On a lock of
	// several slots (spec.slots) the holder is that of the slot this pod holds, or of slot 0
	// when it holds none. For a Global lock whose term another cluster holds, holder is ""
	// (no pod of this cluster) and token is that term's (status.fencingToken).
	OnNewHolder func(holder string, token int64)
}

// DefaultMargin is the margin of a term of lease L when Config.Margin is zero:
// min(max(2s, L/50), L/4).
func DefaultMargin(lease time.Duration) time.Duration {
	return min(max(minDefaultMargin, lease/50), lease/4)
}

// withDefaults fills the defaults of c (from the environment for Identity and Name) and
// checks it; the error wraps ErrInvalidConfig and names the field.
func (c Config) withDefaults() (Config, error) {
	if c.Identity == "" {
		c.Identity = types.UID(os.Getenv("POD_UID"))
	}
	if c.Name == "" {
		c.Name = os.Getenv("POD_NAME")
	}
	if c.StopBudget == 0 {
		c.StopBudget = DefaultStopBudget
	}
	if c.ReleaseTimeout == 0 {
		c.ReleaseTimeout = DefaultReleaseTimeout
	}
	if c.LivenessTimeout == 0 {
		c.LivenessTimeout = DefaultLivenessTimeout
	}
	switch {
	case c.Config == nil:
		return c, invalid("Config", "required")
	case c.Namespace == "":
		return c, invalid("Namespace", "required")
	case c.Lock == "":
		return c, invalid("Lock", "required")
	case c.Identity == "":
		return c, invalid("Identity", "required: set it or $POD_UID (downward API metadata.uid)")
	case c.Margin < 0:
		return c, invalid("Margin", fmt.Sprintf("%v is negative", c.Margin))
	case c.StopBudget < 0:
		return c, invalid("StopBudget", fmt.Sprintf("%v is negative", c.StopBudget))
	case c.ReleaseTimeout < 0:
		return c, invalid("ReleaseTimeout", fmt.Sprintf("%v is negative", c.ReleaseTimeout))
	case c.LivenessTimeout < 0:
		return c, invalid("LivenessTimeout", fmt.Sprintf("%v is negative", c.LivenessTimeout))
	}
	if errs := validation.IsDNS1123Label(c.Namespace); len(errs) > 0 {
		return c, invalid("Namespace", fmt.Sprintf("%q: %s", c.Namespace, strings.Join(errs, "; ")))
	}
	if errs := validation.IsDNS1123Subdomain(c.Lock); len(errs) > 0 {
		return c, invalid("Lock", fmt.Sprintf("%q: %s", c.Lock, strings.Join(errs, "; ")))
	}
	return c, nil
}

// invalid is the error for a refused field.
func invalid(field, reason string) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, reason)
}

// margin is the margin of a term of lease L.
func (c *Config) margin(lease time.Duration) time.Duration {
	if c.Margin > 0 {
		return c.Margin
	}
	return DefaultMargin(lease)
}

// refuses reports why a term of lease L cannot be led, or nil.
func (c *Config) refuses(lease time.Duration) error {
	if lease <= 0 {
		return errors.New("leadership: the grant has no status.termLeaseSeconds")
	}
	if m := c.margin(lease); m >= lease/2 {
		return fmt.Errorf("leadership: Margin %v is not below half of termLeaseSeconds %v: term refused", m, lease)
	}
	return nil
}
