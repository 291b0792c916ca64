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

	mu      sync.Mutex
	refused error // why the open term is refused; guarded by mu
}

// lead runs the child while the term of token lasts; it returns after the child is gone.
func (s *supervisor) lead(ctx context.Context, token int64) {
	vu := s.el.ValidUntil()
	if ctx.Err() != nil {
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
			if c != nil {
				s.stop(c, token, "term ended", last)
			}
			return
		case <-exited:
			code := exitCode(c.state)
			s.log.Info("child exited by itself during the term: the agent exits with its code", "pid", c.pid(), "token", token, "code", code)
			s.stop(c, token, "child exited", last) // what is left of its group
			s.quit(code, c.err)
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
			if c, err = startChild(s.o.argv, s.childEnv(token), s.stdout, s.stderr); err != nil {
				s.quit(exitCodeOf(err), err)
				<-ctx.Done()
				return
			}
			exited = c.exited
			s.log.Info("child started", "pid", c.pid(), "token", token, "validFor", left.Round(time.Millisecond))
			timer.Reset(left - s.o.grace)
		case stepStop:
			s.stop(c, token, "validity ending without a confirming read", last)
			c, exited = nil, nil
			timer.Reset(recheck)
		default:
			timer.Reset(after)
		}
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

// childEnv is the agent's environment plus the term's variables.
func (s *supervisor) childEnv(token int64) []string {
	env := append([]string(nil), s.env...)
	return append(env,
		"LOCKWARDEN_TOKEN="+strconv.FormatInt(token, 10),
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
