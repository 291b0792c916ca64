package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// keepaliveEvery is how often /watch sends an SSE comment, so that idle proxies keep it open
// and a client notices a dead sidecar.
const keepaliveEvery = 10 * time.Second

// leaderReply is the body of /leader and of the leading and holder events.
type leaderReply struct {
	Holder string `json:"holder"`
	Token  int64  `json:"token"`
	// Slot is the slot index of this pod's term (0 for a one-slot lock), in answers and events
	// of a term this pod leads only.
	Slot *int `json:"slot,omitempty"`
	// ValidUntilSeconds is the validity left when the answer was made, in seconds: the token
	// may be used until the client's own send time of the request plus this.
	ValidUntilSeconds float64 `json:"validUntilSeconds,omitempty"`
	// Error says why the answer is not 200.
	Error string `json:"error,omitempty"`
}

// sidecar serves the elector's view over HTTP and keeps the token file.
type sidecar struct {
	o   sidecarOptions
	el  *leadership.Elector
	log logr.Logger
	hub *hub

	// mu orders the callbacks' state changes and events with /watch's subscriptions, so a
	// subscriber sees each change once: in its first event or as an event, never both.
	mu          sync.Mutex
	leading     int64 // the token whose OnStartedLeading ran and OnStoppedLeading has not
	leadingSlot int   // the slot of that term
	led         int64 // the token of the last term this process led (0: none)
	stopping    bool  // told to stop: /leader answers 409 from then on
	fileErr     error // why the token file could not be written, nil after a success
	holder      string
	holderToken int64 // the last holder seen in phase Held (informational)
}

// leaderNow is what /leader answers now: ok with this pod's token while it leads with at
// least minValidity left and the term's token file is written, else the last holder seen.
// The token is read around ValidUntil so that an answer never mixes two terms.
func (s *sidecar) leaderNow() (leaderReply, bool) {
	tok := s.el.Token()
	vu := s.el.ValidUntil()
	left := time.Until(vu)
	same := s.el.Token() == tok
	s.mu.Lock()
	defer s.mu.Unlock()
	if tok != 0 && same && tok == s.leading && !s.stopping && !vu.IsZero() && left > 0 && left >= s.o.minValidity {
		return leaderReply{Holder: s.o.name, Token: tok, Slot: &s.leadingSlot, ValidUntilSeconds: left.Seconds()}, true
	}
	return leaderReply{Holder: s.holder, Token: s.holderToken, Error: "this pod does not lead"}, false
}

// readyz fails when the token file could not be written, and otherwise as the elector's.
func (s *sidecar) readyz(r *http.Request) error {
	s.mu.Lock()
	err := s.fileErr
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.el.ReadyzCheck(r)
}

// leader is GET /leader.
func (s *sidecar) leader(w http.ResponseWriter, _ *http.Request) {
	rep, ok := s.leaderNow()
	status := http.StatusOK
	if !ok {
		status = http.StatusConflict
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(rep) // the client went away: nothing to do
}

// watch is GET /watch: the current state as a first event, then every change, as SSE.
func (s *sidecar) watch(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch, first := s.subscribe()
	defer s.hub.unsubscribe(ch)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if writeEvent(w, first) != nil {
		return
	}
	fl.Flush()
	keepalive := time.NewTicker(keepaliveEvery)
	defer keepalive.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case ev, ok := <-ch:
			if !ok || writeEvent(w, ev) != nil {
				return
			}
		case <-keepalive.C:
			if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil {
				return
			}
		}
		fl.Flush()
	}
}

// writeEvent writes one SSE event.
func writeEvent(w io.Writer, ev event) error {
	_, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, ev.data)
	return err
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("lockwarden-agent: marshal " + err.Error()) // plain structs always marshal
	}
	return b
}

// subscribe returns a /watch subscription and its first event, the state it starts from.
func (s *sidecar) subscribe() (chan event, event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.hub.subscribe()
	if s.leading != 0 {
		return ch, event{name: "leading", data: mustJSON(leaderReply{Holder: s.o.name, Token: s.leading, Slot: &s.leadingSlot,
			ValidUntilSeconds: max(0, time.Until(s.el.ValidUntil()).Seconds())})}
	}
	return ch, event{name: "stopped", data: mustJSON(leaderReply{Holder: s.holder, Token: s.holderToken, Error: "this pod does not lead"})}
}

// callbacks are the elector's: the token file, /leader's gate and /watch follow the terms.
func (s *sidecar) callbacks() leadership.Callbacks {
	return leadership.Callbacks{
		OnStartedLeading: func(ctx context.Context, token int64) {
			slot := leadership.SlotOf(ctx)
			s.mu.Lock()
			s.led = token
			stopping := s.stopping
			s.mu.Unlock()
			if stopping {
				return // told to stop: this term is not offered to the workload
			}
			err := s.writeTerm(token, slot)
			s.mu.Lock()
			defer s.mu.Unlock()
			s.fileErr = err
			if err != nil {
				s.log.Info("token file not written: not answering 200 in this term", "token", token, "error", err.Error())
				return
			}
			s.leading, s.leadingSlot = token, slot
			rep := leaderReply{Holder: s.o.name, Token: token, Slot: &slot, ValidUntilSeconds: max(0, time.Until(s.el.ValidUntil()).Seconds())}
			s.hub.publish(event{name: "leading", data: mustJSON(rep)})
		},
		OnStoppedLeading: func() {
			s.mu.Lock()
			was := s.leading
			s.leading = 0
			s.mu.Unlock()
			err := s.clearTerm()
			s.mu.Lock()
			defer s.mu.Unlock()
			s.fileErr = err
			if err != nil {
				s.log.Info("token file not emptied", "error", err.Error())
			}
			if was != 0 {
				s.hub.publish(event{name: "stopped", data: mustJSON(leaderReply{Holder: s.holder, Token: s.holderToken, Error: "this pod does not lead"})})
			}
		},
		OnNewHolder: func(holder string, token int64) {
			s.log.Info("holder", "holder", holder, "token", token)
			s.mu.Lock()
			defer s.mu.Unlock()
			s.holder, s.holderToken = holder, token
			s.hub.publish(event{name: "holder", data: mustJSON(leaderReply{Holder: holder, Token: token})})
		},
	}
}

// runSidecar is sidecar mode: it serves until ctx ends. When ctx ends (SIGTERM) it stops
// offering the term (/leader answers 409, the token file is emptied) and, with
// --release-on-stop and --native-sidecar, releases this pod's last term if the lock shows the
// controller ending it for the pod's deletion (see releaseOnSignal), then stops. It never
// releases otherwise: the worker in the other container may still be acting under the token.
func runSidecar(ctx context.Context, o sidecarOptions, stderr io.Writer) error {
	s := &sidecar{o: o, log: newLogger(stderr), hub: newHub()}
	// Not the elector's ReleaseOnStop: OnStartedLeading returns at once, and the work goes on
	// in another container. The release on SIGTERM is sent by Release, below.
	el, err := newElector(o.common, 0, false, s.log, s.callbacks())
	if err != nil {
		return err
	}
	s.el = el
	if o.releaseOnStop && !o.nativeSidecar {
		s.log.Info("no release on stop: it needs --native-sidecar (the kubelet stops a native sidecar only after the workload's containers exited)")
	}
	// A token left by an earlier run of the sidecar is not this run's term.
	if err := s.clearTerm(); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /leader", s.leader)
	mux.HandleFunc("GET /watch", s.watch)
	mux.HandleFunc("GET /readyz", readyzHandler(s.readyz))
	mux.HandleFunc("GET /healthz", healthz)
	srvCtx, stopServing := context.WithCancel(ctx)
	srv, err := serve(srvCtx, o.listen, mux)
	if err != nil {
		stopServing()
		return fmt.Errorf("--listen: %w", err)
	}
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	ran := make(chan struct{})
	go func() {
		defer stopRun()
		select {
		case <-ctx.Done():
		case <-ran:
			return
		}
		tok := s.stopOffering()
		if o.releaseOnStop && o.nativeSidecar && tok != 0 {
			s.releaseOnSignal(runCtx, el, tok)
		}
	}()
	runErr := runElector(runCtx, el)
	close(ran)
	s.hub.close()
	stopServing()
	srv.close()
	return errors.Join(runErr, s.clearTerm())
}

// releaseWait bounds how long a stopping sidecar waits for the lock to show that the
// controller is ending this pod's term for its deletion. Usually it shows already: the
// controller sees the deletion when it happens, and the kubelet stops a native sidecar only
// after the workload's containers have exited.
const releaseWait = time.Second

// stopOffering stops offering the term to the workload (/leader answers 409 from now on, the
// token file is emptied, /watch says stopped) and returns the token of the last term this
// process led, 0 for none.
func (s *sidecar) stopOffering() int64 {
	s.mu.Lock()
	s.stopping = true
	was, led := s.leading, s.led
	s.leading = 0
	if was != 0 {
		s.hub.publish(event{name: "stopped", data: mustJSON(leaderReply{Holder: s.holder, Token: s.holderToken, Error: "this pod does not lead"})})
	}
	s.mu.Unlock()
	if err := s.clearTerm(); err != nil {
		s.log.Info("token file not emptied", "error", err.Error())
	}
	return led
}

// releaseOnSignal releases the term of token, the last this process led, when it is known
// that the workload stopped: the agent runs as a native sidecar (--native-sidecar: the
// kubelet sends it SIGTERM only after the pod's regular containers exited, when the pod is
// being deleted) and the newest observation shows the term Releasing with reason
// HolderTerminating (the controller saw the pod's deletion), waiting up to releaseWait for
// it. A sidecar stopped alone (its liveness probe failed, a restart) sees no such term and
// sends nothing: the workload goes on. The release is bounded by the elector's
// ReleaseTimeout.
func (s *sidecar) releaseOnSignal(ctx context.Context, el *leadership.Elector, token int64) {
	if !awaitTerminating(ctx, el, token, releaseWait) {
		reason, ending := el.Ending(token)
		s.log.Info("release on stop not sent: the lock does not show this pod's term ending for its deletion, so the workload may go on (a sidecar stopped alone)",
			"token", token, "releasing", ending, "reason", reason, "waited", releaseWait)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, leadership.DefaultReleaseTimeout+time.Second)
	defer cancel()
	if err := el.Release(ctx); err != nil && !errors.Is(err, leadership.ErrNotLeading) {
		s.log.Info("release on stop not sent", "error", err.Error())
	}
}

// awaitTerminating waits up to limit (and ctx) until el's newest observation shows this
// pod's term of token Releasing for the pod's deletion (HolderTerminating); it reports
// whether it did.
func awaitTerminating(ctx context.Context, el *leadership.Elector, token int64, limit time.Duration) bool {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if reason, ok := el.Ending(token); ok && reason == lockv1.ReasonHolderTerminating {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
}

// writeTerm writes a term's files: the slot file first (with --slot-file), then the token
// file, so that a reader that sees the term's token in the token file finds its slot written.
func (s *sidecar) writeTerm(token int64, slot int) error {
	if s.o.slotFile != "" {
		if err := writeSlot(s.o.slotFile, slot); err != nil {
			return err
		}
	}
	return writeToken(s.o.tokenFile, token)
}

// clearTerm empties the token file, then the slot file (with --slot-file).
func (s *sidecar) clearTerm() error {
	if err := writeToken(s.o.tokenFile, 0); err != nil {
		return err
	}
	if s.o.slotFile != "" {
		return writeSlot(s.o.slotFile, -1)
	}
	return nil
}
