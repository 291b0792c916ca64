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

	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// keepaliveEvery is how often /watch sends an SSE comment, so that idle proxies keep it open
// and a client notices a dead sidecar.
const keepaliveEvery = 10 * time.Second

// leaderReply is the body of /leader and of the leading and holder events.
type leaderReply struct {
	Holder string `json:"holder"`
	Token  int64  `json:"token"`
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
	if tok != 0 && same && tok == s.leading && !vu.IsZero() && left > 0 && left >= s.o.minValidity {
		return leaderReply{Holder: s.o.name, Token: tok, ValidUntilSeconds: left.Seconds()}, true
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
		return ch, event{name: "leading", data: mustJSON(leaderReply{Holder: s.o.name, Token: s.leading,
			ValidUntilSeconds: max(0, time.Until(s.el.ValidUntil()).Seconds())})}
	}
	return ch, event{name: "stopped", data: mustJSON(leaderReply{Holder: s.holder, Token: s.holderToken, Error: "this pod does not lead"})}
}

// callbacks are the elector's: the token file, /leader's gate and /watch follow the terms.
func (s *sidecar) callbacks() leadership.Callbacks {
	return leadership.Callbacks{
		OnStartedLeading: func(_ context.Context, token int64) {
			err := writeToken(s.o.tokenFile, token)
			s.mu.Lock()
			defer s.mu.Unlock()
			s.fileErr = err
			if err != nil {
				s.log.Info("token file not written: not answering 200 in this term", "token", token, "error", err.Error())
				return
			}
			s.leading = token
			rep := leaderReply{Holder: s.o.name, Token: token, ValidUntilSeconds: max(0, time.Until(s.el.ValidUntil()).Seconds())}
			s.hub.publish(event{name: "leading", data: mustJSON(rep)})
		},
		OnStoppedLeading: func() {
			s.mu.Lock()
			was := s.leading
			s.leading = 0
			s.mu.Unlock()
			err := writeToken(s.o.tokenFile, 0)
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

// runSidecar is sidecar mode: it serves until ctx ends.
func runSidecar(ctx context.Context, o sidecarOptions, stderr io.Writer) error {
	s := &sidecar{o: o, log: newLogger(stderr), hub: newHub()}
	// No release on stop: OnStartedLeading returns at once, and the work goes on in
	// another container the sidecar cannot stop.
	el, err := newElector(o.common, 0, false, s.log, s.callbacks())
	if err != nil {
		return err
	}
	s.el = el
	// A token left by an earlier run of the sidecar is not this run's term.
	if err := writeToken(o.tokenFile, 0); err != nil {
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
	runErr := runElector(ctx, el)
	s.hub.close()
	stopServing()
	srv.close()
	return errors.Join(runErr, writeToken(o.tokenFile, 0))
}
