package main

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

// maxStall bounds a stall the harness never releases (it died): the worker goes on after it.
const maxStall = time.Minute

// stallHook is the fault suite's hook between a write's Valid() check and its send (the
// stall kinds, test/chaos/stall.go). POST /stall arms it; the next write that passes its
// Valid() check then waits in it until POST /unstall (or maxStall), and is sent after, with
// the token it was checked with. GET /stall tells the harness whether a write waits, with
// which token, and how the ledger answered it once it was sent.
type stallHook struct {
	mu      sync.Mutex
	armed   bool
	state   stallState
	release chan struct{}
}

// stallState is GET /stall's answer.
type stallState struct {
	Armed   bool   `json:"armed"`
	Stalled bool   `json:"stalled"`          // a write waits in the hook now
	Token   int64  `json:"token,omitempty"`  // the token it was checked with
	Result  string `json:"result,omitempty"` // its result once sent: ok, stale or error
}

// register serves the hook's endpoints on mux.
func (s *stallHook) register(mux *http.ServeMux) {
	mux.HandleFunc("POST /stall", func(rw http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.state.Stalled {
			http.Error(rw, "a write is stalled already", http.StatusConflict)
			return
		}
		s.armed, s.state, s.release = true, stallState{Armed: true}, make(chan struct{})
		rw.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("POST /unstall", func(rw http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		s.armed, s.state.Armed = false, false
		if s.release != nil {
			close(s.release)
			s.release = nil
		}
		s.mu.Unlock()
		rw.WriteHeader(http.StatusOK)
	})
	mux.HandleFunc("GET /stall", func(rw http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		st := s.state
		s.mu.Unlock()
		rw.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(rw).Encode(st)
	})
}

// wait stalls the calling write of token when the hook is armed, until released; it reports
// whether it did. Not cancellable: a paused process does not notice its term end either.
func (s *stallHook) wait(token int64) bool {
	s.mu.Lock()
	if !s.armed {
		s.mu.Unlock()
		return false
	}
	s.armed = false
	s.state = stallState{Stalled: true, Token: token}
	release := s.release
	s.mu.Unlock()
	logf("stall: a write with token %d waits between its Valid() check and its send", token)
	t := time.NewTimer(maxStall)
	defer t.Stop()
	select {
	case <-release:
	case <-t.C:
		logf("stall: not released within %v; sending", maxStall)
	}
	return true
}

// done records the stalled write's result.
func (s *stallHook) done(result string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state.Stalled, s.state.Result = false, result
	logf("stall: the stalled write with token %d was sent: %s", s.state.Token, result)
}
