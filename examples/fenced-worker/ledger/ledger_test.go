package ledger_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/lockwarden/lockwarden/examples/fenced-worker/ledger"
)

func TestLedgerRejectsStaleWrites(t *testing.T) {
	srv := httptest.NewServer(ledger.New().Handler())
	defer srv.Close()
	c := &ledger.Client{URL: srv.URL}
	ctx := context.Background()
	steps := []struct {
		op     string
		writer string
		token  int64
		want   error
	}{
		{"fence", "pod-a", 10, nil},
		{"append", "pod-a", 10, nil},
		{"fence", "pod-b", 12, nil},              // a new term raises the fence first
		{"append", "pod-a", 10, ledger.ErrStale}, // the ex-leader wakes up
		{"append", "pod-c", 12, ledger.ErrStale}, // same token, another writer
		{"append", "pod-b", 12, nil},
	}
	for i, s := range steps {
		var err error
		if s.op == "fence" {
			err = c.Fence(ctx, s.writer, s.token)
		} else {
			err = c.Append(ctx, s.writer, s.token, "x")
		}
		if !errors.Is(err, s.want) || (s.want == nil && err != nil) {
			t.Errorf("step %d: %s(%s, %d) = %v, want %v", i, s.op, s.writer, s.token, err, s.want)
		}
	}
}
