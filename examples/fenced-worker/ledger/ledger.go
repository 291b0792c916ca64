// Package ledger is the fenced resource of the fenced-worker example: an append-only HTTP
// ledger that admits a write only with a fencing token above any it has accepted, or equal to
// the highest and from the writer that presented it first (pkg/fence.Monotonic). Writer IDs
// name processes ("<pod UID>/<incarnation>", pkg/fence/writer), so a paused or partitioned
// ex-leader that wakes up and writes with its old token is refused with 409 Conflict, and so
// is a late write of a process that died, once its pod's restarted process has raised the
// fence, or the restarted process itself if the dead one got there first under the same token.
//
// Shards (shards.go) is a ledger of several shards, each fenced on its own: the resource of
// the sharding pattern, where slot i of a lock with spec.slots owns shard i.
package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/lockwarden/lockwarden/pkg/fence"
	"github.com/lockwarden/lockwarden/pkg/fence/writer"
)

// Write is a request to the ledger: raise the fence (/fence) or append an entry (/append).
type Write struct {
	// Writer identifies the writing process: its writer ID, "<pod UID>/<incarnation>"
	// (pkg/leadership's Elector.Writer, lockwarden-agent's $LOCKWARDEN_WRITER). Any non-empty
	// string is admitted; one that names a pod and not a process cannot tell a late write of
	// the pod's dead process from its live one's.
	Writer string `json:"writer"`
	// Name is the writer's name for messages (the pod name); optional.
	Name string `json:"name,omitempty"`
	// Token is the writer's fencing token.
	Token int64 `json:"token"`
	// Entry is the text to append (ignored by /fence).
	Entry string `json:"entry,omitempty"`
}

// Entry is one accepted append.
type Entry struct {
	Seq    int       `json:"seq"`
	Token  int64     `json:"token"`
	Writer string    `json:"writer"`
	Entry  string    `json:"entry"`
	At     time.Time `json:"at"`
}

// Outcome is one write the ledger decided on, accepted or not: the history a checker reads.
type Outcome struct {
	Op       string    `json:"op"` // fence or append
	Token    int64     `json:"token"`
	Writer   string    `json:"writer"`
	Accepted bool      `json:"accepted"`
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
}

// Reply is the ledger's answer to a write.
type Reply struct {
	Accepted bool   `json:"accepted"`
	Highest  int64  `json:"highest"`
	Error    string `json:"error,omitempty"`
}

// HighestHeader is the reply header of /fence and /append that carries Reply.Highest.
const HighestHeader = "Ledger-Highest"

// Server is the ledger. The zero value is not usable; call New.
type Server struct {
	mu       sync.Mutex // admit and append together: a write admitted is a write applied
	fence    fence.Monotonic
	entries  []Entry
	outcomes []Outcome
}

// New returns an empty ledger.
func New() *Server { return &Server{} }

// Handler serves POST /fence, POST /append, GET /entries and GET /outcomes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /fence", func(w http.ResponseWriter, r *http.Request) { s.write(w, r, "fence") })
	mux.HandleFunc("POST /append", func(w http.ResponseWriter, r *http.Request) { s.write(w, r, "append") })
	mux.HandleFunc("GET /entries", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		reply(w, http.StatusOK, s.entries)
	})
	mux.HandleFunc("GET /outcomes", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		reply(w, http.StatusOK, s.outcomes)
	})
	return mux
}

func (s *Server) write(w http.ResponseWriter, r *http.Request, op string) {
	var req Write
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		reply(w, http.StatusBadRequest, Reply{Error: fmt.Sprintf("bad request body: %v", err)})
		return
	}
	rep, status := s.Apply(op, req)
	// For clients that read headers only (a shell worker with busybox wget): the highest
	// token tells a stale token (lower) from one another writer presented first (equal).
	w.Header().Set(HighestHeader, strconv.FormatInt(rep.Highest, 10))
	reply(w, status, rep)
}

// Apply decides one write: op "fence" raises the fence, "append" also appends the entry.
// It returns the reply and its HTTP status: 200 accepted, 409 stale token, 400 bad input.
func (s *Server) Apply(op string, req Write) (Reply, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.fence.Admit(req.Writer, req.Token)
	highest, _ := s.fence.Highest()
	out := Outcome{Op: op, Token: req.Token, Writer: req.Writer, Accepted: err == nil, At: time.Now()}
	if err != nil {
		out.Reason = err.Error()
	}
	s.outcomes = append(s.outcomes, out)
	var stale *fence.StaleError
	switch {
	case errors.As(err, &stale) && stale.Current == req.Token:
		_, first := s.fence.Highest()
		return Reply{Highest: highest, Error: fmt.Sprintf("token %d from %s is in use by another writer: the ledger admitted it from %s first",
			req.Token, writerName(req), first)}, http.StatusConflict
	case errors.As(err, &stale):
		return Reply{Highest: highest, Error: fmt.Sprintf("token %d from %s is stale: the ledger has accepted token %d", req.Token, writerName(req), stale.Current)}, http.StatusConflict
	case err != nil:
		return Reply{Highest: highest, Error: err.Error()}, http.StatusBadRequest
	}
	if op == "append" {
		s.entries = append(s.entries, Entry{Seq: len(s.entries) + 1, Token: req.Token, Writer: req.Writer, Entry: req.Entry, At: out.At})
	}
	return Reply{Accepted: true, Highest: highest}, http.StatusOK
}

// writerName is "pod NAME (uid UID)" when the write names its pod, else "writer ID".
func writerName(w Write) string {
	if w.Name == "" {
		return "writer " + w.Writer
	}
	return fmt.Sprintf("pod %s (uid %s)", w.Name, writer.Owner(w.Writer))
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client went away: nothing to do
}
