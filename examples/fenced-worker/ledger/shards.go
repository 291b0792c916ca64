package ledger

import (
	"fmt"
	"net/http"
	"strconv"
)

// Shards is a ledger of n shards, each a ledger of its own with its own fence: the fenced
// resource of the sharding pattern, where slot i of a lock with spec.slots n owns shard i and
// writes to it under slot i's token. A token one shard has accepted says nothing to another:
// each shard refuses a token below the highest it has accepted itself, so a paused ex-holder
// of slot i is refused by shard i once slot i's next holder has raised shard i's fence.
//
// Shard i is served under /shards/<i>/ with the one-ledger paths (/shards/2/fence,
// /shards/2/append, /shards/2/entries, /shards/2/outcomes); Client.Shard addresses it.
type Shards struct {
	shards []*Server
}

// NewShards returns a ledger of n empty shards, 0 to n-1; n must be at least 1.
func NewShards(n int) (*Shards, error) {
	if n < 1 {
		return nil, fmt.Errorf("a sharded ledger needs at least 1 shard, got %d", n)
	}
	s := &Shards{shards: make([]*Server, n)}
	for i := range s.shards {
		s.shards[i] = New()
	}
	return s, nil
}

// Shard returns shard i, or nil if there is none.
func (s *Shards) Shard(i int) *Server {
	if i < 0 || i >= len(s.shards) {
		return nil
	}
	return s.shards[i]
}

// Handler serves each shard's paths under /shards/<i>/, and a 404 with a JSON Reply naming the
// shards there are for any other path.
func (s *Shards) Handler() http.Handler {
	mux := http.NewServeMux()
	for i, sh := range s.shards {
		prefix := "/shards/" + strconv.Itoa(i)
		mux.Handle(prefix+"/", http.StripPrefix(prefix, sh.Handler()))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		reply(w, http.StatusNotFound, Reply{Error: fmt.Sprintf("no such path %s: this ledger serves shards 0 to %d under /shards/<i>/", r.URL.Path, len(s.shards)-1)})
	})
	return mux
}

// ShardURL is the base URL of shard i of the sharded ledger at base.
func ShardURL(base string, i int) string { return base + "/shards/" + strconv.Itoa(i) }

// Shard returns a client of shard i of the sharded ledger at c.URL (a Shards' Handler).
func (c *Client) Shard(i int) *Client {
	s := *c
	s.URL = ShardURL(c.URL, i)
	return &s
}
