package leadership

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
)

// ErrAlreadyRan is returned by a second call of Run: an Elector runs once.
var ErrAlreadyRan = errors.New("leadership: Run called more than once")

// Elector tells one pod whether it holds one DistributedLock. Create it with New, start it
// with Run; its other methods are safe for concurrent use at any time.
type Elector struct {
	cfg    Config
	client *rest.RESTClient
	ran    atomic.Bool

	// led is the current term as Valid, ValidUntil and Token see it; nil when not leading.
	// Only the decision loop stores it.
	led atomic.Pointer[termView]

	// releases carries Release calls to the decision loop; loopDone is closed when it ends.
	releases chan chan<- error
	loopDone chan struct{}
	// released is, per token lineage (lineage.go), the highest token whose release is sent,
	// in flight, or seen on the lock: the loop does not lead it again. Only a release the API
	// server refused puts it back.
	released tokenMark
	// abandoned is, per lineage, the highest token Abandon was called with: never led or
	// released again. abandons tells the loop (capacity 1).
	abandoned tokenMark
	abandons  chan struct{}
	// ledTop is, per lineage, the highest token of a term this process led (the Elector's or
	// the ResourceLock's): Abandon marks the lineages of the token it is given.
	ledTop tokenMark
	// writer is Writer(): the writer ID of the term whose OnStartedLeading was called last
	// (before any, the one the first term will present). draws counts the writers drawn.
	writer atomic.Pointer[string]
	draws  atomic.Int64
	first  *string // the first term's writer (firstWriter)

	// leader is the holder of the newest accepted observation while it is Held (GetLeader);
	// nil otherwise. ending is its term while it is Releasing (Ending); nil otherwise. Only
	// the decision loop stores them.
	leader atomic.Pointer[leaderView]
	ending atomic.Pointer[ending]
	// count holds the counters Collector reports.
	count counters

	mu    sync.Mutex
	ready readiness // guarded by mu
}

// termView is an immutable snapshot of the current term.
type termView struct {
	token    int64
	lin      lineage // the lineage of token (lineage.go)
	slot     int     // the slot index of the term (0 for a one-slot lock)
	deadline instant // send time of the newest confirming read + termLeaseSeconds - margin
}

// readiness is what ReadyzCheck judges.
type readiness struct {
	running   bool
	lastRead  instant       // send time of the newest successful consistent read (Run's start before one)
	readLimit time.Duration // termLeaseSeconds - margin of the newest lease known
	readErr   error         // why the newest read failed; nil after a success
	refused   error         // why the newest observation's grant to this pod is refused
	stops     []instant     // when each term whose stop callbacks have not returned ended, oldest first
}

// New checks cfg, fills its defaults and returns an Elector that has not started. An invalid
// cfg gives an error wrapping ErrInvalidConfig that names the field.
func New(cfg Config) (*Elector, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := lockv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("leadership: register API types: %w", err)
	}
	rc := rest.CopyConfig(cfg.Config)
	rc.GroupVersion = &lockv1.GroupVersion
	rc.APIPath = "/apis"
	rc.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	// JSON always: a custom resource has no protobuf form, and JSON watch frames are what
	// operators and fault-injection proxies can read.
	rc.ContentType = runtime.ContentTypeJSON
	rc.AcceptContentTypes = runtime.ContentTypeJSON
	if rc.UserAgent == "" {
		rc.UserAgent = rest.DefaultKubernetesUserAgent() + " lockwarden-leadership"
	}
	client, err := rest.RESTClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("%w: Config: %w", ErrInvalidConfig, err)
	}
	e := &Elector{cfg: cfg, client: client, releases: make(chan chan<- error), loopDone: make(chan struct{}),
		abandons: make(chan struct{}, 1)}
	first := firstWriter(cfg.Identity)
	e.first = &first
	e.writer.Store(&first)
	return e, nil
}

// Run elects until ctx ends: it reads the lock, watches it and calls the callbacks. It returns
// nil once ctx has ended and every goroutine it started has returned, including the callbacks
// (OnStartedLeading returned and OnStoppedLeading ran for a term open at that moment). With
// Config.SingleTerm it also returns, the same way, once its first term has ended. It
// returns ErrAlreadyRan at once when called a second time. A release due when ctx ends (see
// Config.ReleaseOnStop) is sent before Run returns, within Config.ReleaseTimeout.
func (e *Elector) Run(ctx context.Context) error {
	if !e.ran.CompareAndSwap(false, true) {
		return ErrAlreadyRan
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	e.mu.Lock()
	e.ready = readiness{running: true, lastRead: now(), readLimit: readLimit(&e.cfg, defaultLease)}
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.ready.running = false
		e.mu.Unlock()
	}()

	observations := make(chan observation)
	readNow := make(chan struct{}, 1)
	cb := newRunner(e.cfg.Callbacks, e.stopDone)
	// A release due at shutdown is sent after Run's context ended: bounded by ReleaseTimeout.
	relCtx := context.WithoutCancel(ctx)
	cb.send = func(j *releaseJob) {
		if j.token <= e.abandoned.load(j.lin) {
			// Abandoned while its callbacks still ran: another writer may act under it.
			e.log().Info("release not sent: the term was abandoned", "token", j.token)
			j.finish(ErrNotLeading)
			return
		}
		err := e.sendRelease(relCtx, j.lin, j.token, j.obj)
		e.count.release(err)
		j.finish(err)
	}
	cb.skip = e.skipRelease
	cb.setWriter = e.setWriter
	var verdicts chan bool // nil without SingleTerm: the loop never receives from it
	if e.cfg.SingleTerm {
		verdicts = make(chan bool, 1)
		cb.singleTerm(verdicts)
	}
	var wg sync.WaitGroup
	wg.Go(func() { e.readLoop(ctx, readNow, observations) })
	wg.Go(func() { e.watchLoop(ctx, observations) })
	wg.Go(cb.run)

	l := &loop{e: e, ctx: ctx, cb: cb, readNow: readNow, verdicts: verdicts, log: e.log()}
	l.run(observations) // returns when ctx ends (or SingleTerm's term ended), after ending any open term
	cancel()            // ends the reads and the watch when SingleTerm's term ended first
	close(e.loopDone)
	cb.close()
	wg.Wait()
	utilnet.CloseIdleConnectionsFor(e.client.Client.Transport)
	return nil
}

// Valid reports whether this pod leads now: a term is open and its deadline has not passed.
// It reads the clock itself, so it turns false at the deadline even when the goroutine that
// would end the term has not run yet (after a pause or a suspend). Check it right before each
// write, and send the term's token with the write.
func (e *Elector) Valid() bool {
	v := e.led.Load()
	return v != nil && now() < v.deadline && v.token > e.abandoned.load(v.lin)
}

// ValidUntil returns the current term's deadline, or the zero Time when not leading. A newer
// confirming read moves it later; an observation of another holder, phase or token, or
// Abandon, ends the term before it.
func (e *Elector) ValidUntil() time.Time {
	v := e.led.Load()
	if v == nil || v.token <= e.abandoned.load(v.lin) {
		return time.Time{}
	}
	return v.deadline.Wall()
}

// Token returns the current term's fencing token while Valid() is true, else 0.
func (e *Elector) Token() int64 {
	v := e.led.Load()
	if v == nil || now() >= v.deadline || v.token <= e.abandoned.load(v.lin) {
		return 0
	}
	return v.token
}

// ReadyzCheck is a readiness check (the shape of controller-runtime's healthz.Checker). It
// fails when Run is not running; when no consistent read of the lock has succeeded for longer
// than termLeaseSeconds - margin (the lock's spec.leaseDurationSeconds before it has a term,
// 15 s before the first read); when the callbacks of an ended term overran Config.StopBudget;
// and while the lock is granted to this pod under a term it refuses (see Config.Margin). It
// never depends on holding the lock: a pod that cannot see its lock, or cannot stop, should
// not be a candidate.
func (e *Elector) ReadyzCheck(*http.Request) error {
	t := now()
	e.mu.Lock()
	defer e.mu.Unlock()
	r := &e.ready
	switch {
	case !r.running:
		return errors.New("leadership: elector is not running")
	case len(r.stops) > 0 && t.Sub(r.stops[0]) > e.cfg.StopBudget:
		return fmt.Errorf("leadership: callbacks still running %v after the term ended, over the stop budget %v",
			t.Sub(r.stops[0]).Round(time.Millisecond), e.cfg.StopBudget)
	case t.Sub(r.lastRead) > r.readLimit:
		return fmt.Errorf("leadership: no consistent read of distributedlock %s/%s for %v (limit %v): %w",
			e.cfg.Namespace, e.cfg.Lock, t.Sub(r.lastRead).Round(time.Millisecond), r.readLimit, errOrUnknown(r.readErr))
	case r.refused != nil:
		return r.refused
	}
	return nil
}

// errOrUnknown is err, or a placeholder when no read has failed yet (it has not returned).
func errOrUnknown(err error) error {
	if err != nil {
		return err
	}
	return errors.New("no read has completed")
}

// readLimit is how long the pod may go without a consistent read before it is not ready:
// L - margin, or L/2 for a term whose margin is refused.
func readLimit(c *Config, lease time.Duration) time.Duration {
	if m := c.margin(lease); m < lease/2 {
		return lease - m
	}
	return lease / 2
}

// readDone records a successful consistent read sent at sent, of a lock of lease (0: unknown).
func (e *Elector) readDone(sent instant, lease time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if sent > e.ready.lastRead {
		e.ready.lastRead = sent
	}
	e.ready.readErr = nil
	e.count.readsOK.Add(1)
	if lease > 0 {
		e.ready.readLimit = readLimit(&e.cfg, lease)
	}
}

// readFailed records why the newest read failed.
func (e *Elector) readFailed(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ready.readErr = err
	e.count.readsFailed.Add(1)
}

// setRefused records why a grant to this pod is refused, or nil.
func (e *Elector) setRefused(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ready.refused = err
}

// stopBegan records that a term ended at t; its stop callbacks are now due.
func (e *Elector) stopBegan(t instant) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.ready.stops = append(e.ready.stops, t)
}

// stopDone records that the oldest ended term's stop callbacks returned (or were not due).
func (e *Elector) stopDone() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.ready.stops) > 0 {
		e.ready.stops = e.ready.stops[1:]
	}
}
