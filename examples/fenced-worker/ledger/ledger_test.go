package ledger_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lockwarden/lockwarden/examples/fenced-worker/ledger"
	"github.com/lockwarden/lockwarden/pkg/fence/writer"
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

// TestStaleMessageNamesThePod: the refusal says once that the write was refused and names the
// writer's pod, not only its UID.
func TestStaleMessageNamesThePod(t *testing.T) {
	srv := httptest.NewServer(ledger.New().Handler())
	defer srv.Close()
	ctx := context.Background()
	if err := (&ledger.Client{URL: srv.URL, Name: "payments-1"}).Fence(ctx, "uid-b", 8); err != nil {
		t.Fatal(err)
	}
	err := (&ledger.Client{URL: srv.URL, Name: "payments-0"}).Append(ctx, "uid-a", 5, "late")
	want := "ledger refused the write: token 5 from pod payments-0 (uid uid-a) is stale: the ledger has accepted token 8"
	if err == nil || err.Error() != want {
		t.Fatalf("Append with a stale token = %v, want %q", err, want)
	}
	err = (&ledger.Client{URL: srv.URL}).Append(ctx, "uid-a", 5, "late")
	if want := "token 5 from writer uid-a is stale"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Append without a name = %v, want it to contain %q", err, want)
	}
	if errors.Is(err, ledger.ErrOtherWriter) {
		t.Fatalf("Append with a lower token = %v, want no ErrOtherWriter", err)
	}
}

// TestLedgerTellsIncarnationsApart: two processes of one pod are two writers. Under one token,
// the one that raised the fence first keeps it: the other is refused with ErrOtherWriter (its
// term is over), and a late write of a dead process whose restarted twin raised the fence
// first is refused too. The messages name the pod UID, not the incarnation.
func TestLedgerTellsIncarnationsApart(t *testing.T) {
	srv := httptest.NewServer(ledger.New().Handler())
	defer srv.Close()
	ctx := context.Background()
	old := writer.ID("uid-a", writer.NewIncarnation())
	restarted := writer.ID("uid-a", writer.NewIncarnation())
	c := &ledger.Client{URL: srv.URL, Name: "payments-0"}
	if err := c.Fence(ctx, restarted, 9); err != nil {
		t.Fatalf("Fence(restarted, 9) = %v, want nil", err)
	}
	if err := c.Append(ctx, restarted, 9, "new"); err != nil {
		t.Fatalf("Append(restarted, 9) = %v, want nil", err)
	}
	err := c.Append(ctx, old, 9, "late")
	if !errors.Is(err, ledger.ErrStale) || !errors.Is(err, ledger.ErrOtherWriter) {
		t.Fatalf("late Append(old, 9) = %v, want ErrStale and ErrOtherWriter", err)
	}
	want := "token 9 from pod payments-0 (uid uid-a) is in use by another writer: the ledger admitted it from " + restarted + " first"
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("late Append(old, 9) = %q, want it to contain %q", err, want)
	}
	if err := c.Fence(ctx, old, 10); err != nil {
		t.Fatalf("Fence(old, 10) = %v, want nil: a higher token is a new term", err)
	}
}
