package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/lockwarden/lockwarden/pkg/fence/writer"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// stopSlack is added to --grace for the elector's stop budget: a stop takes at most the grace,
// plus a second when members are left after SIGKILL.
const stopSlack = 2 * time.Second

// supervisor runs the child of exec mode during terms; lead is the elector's
// OnStartedLeading, so the child runs on the elector's callback goroutine's schedule and the
// elector's stop budget covers its stop.
type supervisor struct {
	o              execOptions
	env            []string // the agent's environment; the child gets it plus LOCKWARDEN_*
	stdout, stderr io.Writer
	log            logr.Logger
	el             *leadership.Elector
	// quit ends the agent with an exit code and an error (nil: the child's own exit).
	quit func(code int, err error)

	// ran is the highest token a child was started under; only lead (the elector's callback
	// goroutine) uses it.
	ran int64

	mu      sync.Mutex
	refused error // why the open term is refused; guarded by mu
}

// lead runs the child while the term of token lasts; it returns after the child is gone.
//
// A child runs at most once under a token. Every resource the child fenced admitted the
// token from its writer ($LOCKWARDEN_WRITER), so a second child under the same token (another
// writer) would be refused there and could only exit; and the first child's late writes
// could pass a resource it had not reached. So when the child is stopped for want of
// validity (no confirming read), the agent abandons the token at once: readiness fails while
// the lock names the pod with it, the controller ends the term, and the child starts again
// only for a new token. A token led again after its term ended (a read confirmed it once
// more) is abandoned the same way, without a child.
func (s *supervisor) lead(ctx context.Context, token int64) {
	vu := s.el.ValidUntil()
	if ctx.Err() != nil {
		return
	}
	if token <= s.ran {
		s.el.Abandon(token)
		s.log.Info("term led again under a token a child already ran under: abandoned without starting one (the controller ends the term; a new token starts the child)", "token", token)
		<-ctx.Done()
		return
	}
	if err := refuseTerm(time.Until(vu), s.o.grace); err != nil {
		s.setRefused(err)
		s.log.Info("term refused", "token", token, "error", err.Error())
		<-ctx.Done()
		s.setRefused(nil)
		return
	}
	var c *child
	var exited <-chan struct{}
	last := vu // the newest ValidUntil seen in this term
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			if c == nil {
				return
			}
			select {
			case <-exited:
				// It exited by itself as the term ended: its exit wins, so that a child
				// refused for its token is abandoned, never released.
				s.exitedInTerm(c, token, last)
				return
			default:
			}
			s.stop(c, token, "term ended", last)
			s.vouch(c, token)
			return
		case <-exited:
			s.exitedInTerm(c, token, last)
			return
		case <-timer.C:
		}
		vu := s.el.ValidUntil()
		if ctx.Err() != nil {
			continue // vu may be a later term's: the term is over
		}
		left := time.Duration(-1)
		if !vu.IsZero() {
			last, left = vu, time.Until(vu)
		}
		st, after := decide(c != nil, left, s.o.grace)
		switch st {
		case stepStart:
			var err error
			if c, err = startChild(s.o.argv, s.childEnv(token, leadership.SlotOf(ctx)), s.stdout, s.stderr); err != nil {
				s.quit(exitCodeOf(err), err)
				<-ctx.Done()
				return
			}
			s.ran = token
			exited = c.exited
			s.log.Info("child started", "pid", c.pid(), "token", token, "validFor", left.Round(time.Millisecond))
			timer.Reset(left - s.o.grace)
		case stepStop:
			// No second child under this token (see above): end the term for this process
			// now, so that readiness fails and the controller moves on, then stop the child.
			s.el.Abandon(token)
			s.log.Info("validity ending without a confirming read: the term is abandoned; the child starts again only for a new token", "token", token)
			s.stop(c, token, "validity ending without a confirming read", last)
			<-ctx.Done() // Abandon ends the term
			return
		default:
			timer.Reset(after)
		}
	}
}

// exitedInTerm handles a child that exited by itself during the term (or as it ended): why it
// exited is its own business (done, crashed, or its resource refused the token because another
// writer presented it first), so the agent does not vouch for this term any more, never
// releases it, stops what is left of it, and exits with the child's code.
func (s *supervisor) exitedInTerm(c *child, token int64, last time.Time) {
	code := exitCode(c.state)
	s.el.Abandon(token)
	s.log.Info("child exited by itself during the term: the agent ends the term without a release and exits with its code", "pid", c.pid(), "token", token, "code", code)
	s.stop(c, token, "child exited", last) // what is left of it
	s.quit(code, c.err)
}

// vouch abandons token, so that no release goes out for it, when the child's guard did not
// account for everything the child started (see child.accounted).
func (s *supervisor) vouch(c *child, token int64) {
	if !c.accounted() {
		s.el.Abandon(token)
		s.log.Info("the child's guard did not end by its own rule (killed?): descendants of the child may be left, so the term is abandoned, not released", "pid", c.pid(), "token", token)
	}
}

// stop stops c: SIGTERM to its group now, SIGKILL after the grace and before validUntil.
func (s *supervisor) stop(c *child, token int64, reason string, validUntil time.Time) {
	now := time.Now()
	killAt := killTime(now, validUntil, s.o.grace)
	s.log.Info("stopping child", "pid", c.pid(), "token", token, "reason", reason, "killIn", killAt.Sub(now).Round(time.Millisecond))
	stuck := func(err error) {
		s.log.Info("child's group still has members: waiting for them (readiness fails past the stop budget)", "pid", c.pid(), "error", err.Error())
	}
	if err := c.stop(killAt, stuck); err != nil {
		s.log.Info("signal child", "pid", c.pid(), "error", err.Error())
	}
	s.log.Info("child stopped", "pid", c.pid(), "token", token, "after", time.Since(now).Round(time.Millisecond))
}

// childEnv is the agent's environment plus the term's variables for a child about to start:
// LOCKWARDEN_WRITER is a writer ID of its own (the pod UID and an incarnation drawn for this
// child), so that a child started again in the same term is another writer than the one
// before it, whose writes may still be on their way. LOCKWARDEN_SLOT is the term's slot index
// (0 for a one-slot lock).
func (s *supervisor) childEnv(token int64, slot int) []string {
	env := append([]string(nil), s.env...)
	return append(env,
		"LOCKWARDEN_TOKEN="+strconv.FormatInt(token, 10),
		"LOCKWARDEN_SLOT="+strconv.Itoa(slot),
		"LOCKWARDEN_WRITER="+writer.ID(s.o.identity, writer.NewIncarnation()),
		"LOCKWARDEN_LOCK="+s.o.namespace+"/"+s.o.lock)
}

func (s *supervisor) setRefused(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refused = err
}

// readyz fails while a term is refused, and otherwise as the elector's check.
func (s *supervisor) readyz(r *http.Request) error {
	s.mu.Lock()
	err := s.refused
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.el.ReadyzCheck(r)
}

// runExec is exec mode: it returns the exit code and, for a failure of the agent, the error.
func runExec(ctx context.Context, o execOptions, environ []string, stdout, stderr io.Writer) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	log := newLogger(stderr)
	var once sync.Once
	code, failure := exitOK, error(nil)
	s := &supervisor{o: o, env: environ, stdout: stdout, stderr: stderr, log: log,
		quit: func(c int, err error) {
			once.Do(func() {
				code, failure = c, err
				cancel()
			})
		}}
	el, err := newElector(o.common, o.grace+stopSlack, o.releaseOnStop, log, leadership.Callbacks{
		OnStartedLeading: s.lead,
		OnNewHolder: func(holder string, token int64) {
			log.Info("holder", "holder", holder, "token", token)
		},
	})
	if err != nil {
		return exitAgent, err
	}
	s.el = el
	if err := becomeSubreaper(); err != nil {
		return exitAgent, err
	}
	if o.probe != "0" {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /readyz", readyzHandler(s.readyz))
		mux.HandleFunc("GET /healthz", healthz)
		srv, err := serve(ctx, o.probe, mux)
		if err != nil {
			return exitAgent, fmt.Errorf("--probe-address: %w", err)
		}
		defer srv.close()
	}
	if err := runElector(ctx, el); err != nil {
		return exitAgent, err
	}
	once.Do(func() {}) // no quit after Run returned
	if failure != nil && code == exitOK {
		code = exitAgent
	}
	return code, failure
}
