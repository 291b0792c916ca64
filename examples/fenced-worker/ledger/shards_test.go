package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lockwarden/lockwarden/examples/fenced-worker/ledger"
)

// TestShardsFenceApart: each shard has its own fence. A token shard 0 accepted does not
// raise shard 1's, and a stale write to one shard is refused there while the other shards
// keep admitting their own holders.
func TestShardsFenceApart(t *testing.T) {
	s, err := ledger.NewShards(3)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	ctx := context.Background()
	c := &ledger.Client{URL: srv.URL}
	for i, st := range []struct {
		shard  int
		op     string
		writer string
		token  int64
		want   error
	}{
		{0, "fence", "pod-a", 10, nil},
		{1, "fence", "pod-b", 7, nil}, // below shard 0's 10: shard 1 has its own fence
		{2, "fence", "pod-c", 12, nil},
		{0, "append", "pod-a", 10, nil},
		{2, "fence", "pod-d", 15, nil},              // slot 2's next holder raises shard 2's fence
		{2, "append", "pod-c", 12, ledger.ErrStale}, // slot 2's ex-holder wakes up: refused
		{1, "append", "pod-b", 7, nil},              // shard 1 keeps admitting its holder
		{0, "append", "pod-a", 10, nil},             // and so does shard 0
		{2, "append", "pod-d", 15, nil},
	} {
		sc := c.Shard(st.shard)
		if st.op == "fence" {
			err = sc.Fence(ctx, st.writer, st.token)
		} else {
			err = sc.Append(ctx, st.writer, st.token, "x")
		}
		if !errors.Is(err, st.want) || (st.want == nil && err != nil) {
			t.Errorf("step %d: shard %d %s(%s, %d) = %v, want %v", i, st.shard, st.op, st.writer, st.token, err, st.want)
		}
	}
	for i, want := range []int{2, 1, 1} {
		if got := len(entries(t, srv.URL, i)); got != want {
			t.Errorf("shard %d holds %d entries, want %d", i, got, want)
		}
	}
}

// TestShardsUnknownShard: a path outside the shards is a 404 whose message names the shards.
func TestShardsUnknownShard(t *testing.T) {
	s, err := ledger.NewShards(2)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, shard := range []int{2, -1} {
		err := (&ledger.Client{URL: srv.URL}).Shard(shard).Append(context.Background(), "pod-a", 1, "x")
		if want := "this ledger serves shards 0 to 1"; err == nil || !strings.Contains(err.Error(), want) || errors.Is(err, ledger.ErrStale) {
			t.Errorf("Append to shard %d = %v, want an error containing %q, not ErrStale", shard, err, want)
		}
	}
	if s.Shard(2) != nil || s.Shard(-1) != nil {
		t.Errorf("Shard(2), Shard(-1) = %v, %v, want nil", s.Shard(2), s.Shard(-1))
	}
	for _, n := range []int{0, -3} {
		if _, err := ledger.NewShards(n); err == nil {
			t.Errorf("NewShards(%d) = nil error, want one", n)
		}
	}
}

// entries returns the entries of shard i of the sharded ledger at url.
func entries(t *testing.T, url string, i int) []ledger.Entry {
	t.Helper()
	resp, err := http.Get(ledger.ShardURL(url, i) + "/entries")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var es []ledger.Entry
	if err := json.NewDecoder(resp.Body).Decode(&es); err != nil {
		t.Fatalf("GET shard %d's entries: status %s: %v", i, resp.Status, err)
	}
	return es
}
