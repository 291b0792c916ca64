package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/internal/etcdtest"
)

// Review mx3: acquireSlot's up-front guard check (slotGuardsFit) must accept
// exactly the guard counts whose grant etcd takes, at any --max-txn-ops. For
// each limit one etcd runs with that --max-txn-ops; for g = 0..limit+1 the
// test sends the grant itself (grantSlot, bypassing the check) in both of
// its shapes, TryAcquireSlot's (no entry) and a waiter's (its entry and the
// "nobody older" compare), with every Then op the grant may carry, and
// notes whether etcd refused it for its size (ErrTooManyOps). Its compares
// fail on purpose (the call's tombstone exists), so nothing applies and the
// Else branch's nested transaction runs. Then the public call with g guards
// must be refused up front (ErrInvalid, saying how many fit) exactly when
// etcd refused a grant it sends: TryAcquireSlot sends only the first shape,
// AcquireSlot both (a free slot at once, or its entry's grant).
func TestReviewMx3SlotGuardsMatchEtcd(t *testing.T) {
	for _, maxOps := range []int{8, 9, 10, 128} {
		t.Run(fmt.Sprint(maxOps), func(t *testing.T) { slotGuardsMatchEtcd(t, maxOps) })
	}
}

func slotGuardsMatchEtcd(t *testing.T, maxOps int) {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv := etcdtest.Start(t, etcdtest.WithMaxTxnOps(uint(maxOps)))
	cli := srv.Client(t)
	const pfx = "/t/mx3"
	eng := NewEngine(cli, WithPrefix(pfx), WithMaxTxnOps(maxOps))
	s, err := eng.NewSession(c, 10*time.Second)
	if err != nil {
		t.Fatalf("NewSession = %v", err)
	}
	defer func() {
		if err := s.Close(c); err != nil {
			t.Errorf("Close = %v", err)
		}
	}()
	guards := func(g int) []clientv3.Cmp {
		cmps := make([]clientv3.Cmp, g)
		for i := range cmps {
			cmps[i] = clientv3.Compare(clientv3.CreateRevision(pfx+"/none"), "=", 0)
		}
		return cmps
	}

	// What etcd takes: the grant of each shape, with g guards.
	gone := eng.gonePath("mx3")
	if _, err := cli.Put(c, gone, ""); err != nil {
		t.Fatalf("put the tombstone = %v", err)
	}
	st, err := s.readSem(c, "sem", 2, "", 0)
	if err != nil {
		t.Fatalf("readSem = %v", err)
	}
	v := value{Holder: "h", Call: "mx3", Slots: 2}
	shapes := []struct {
		name  string
		entry string
	}{{"TryAcquireSlot's grant", ""}, {"a waiter's grant", eng.semPath("sem", s.id)}}
	takes := make([][]bool, len(shapes)) // by shape, then g
	for k, sh := range shapes {
		for g := 0; g <= maxOps+1; g++ {
			token, _, err := s.grantSlot(c, "sem", 0, v, st, sh.entry, 1, gone, gone, guards(g))
			switch {
			case errors.Is(err, rpctypes.ErrTooManyOps):
				takes[k] = append(takes[k], false)
			case err != nil || token != 0:
				t.Fatalf("%s with %d guards = token %d, %v; want 0 (its compares fail) or ErrTooManyOps", sh.name, g, token, err)
			default:
				takes[k] = append(takes[k], true)
			}
		}
	}
	most := func(ok func(g int) bool) int { // the most guards of a leading run that etcd takes
		n := -1
		for n+1 <= maxOps+1 && ok(n+1) {
			n++
		}
		return n
	}

	// What the public calls refuse up front.
	for _, call := range []struct {
		name string
		take func(ctx context.Context, g int) (*SlotLock, error)
		etcd func(g int) bool
	}{
		{"TryAcquireSlot", func(ctx context.Context, g int) (*SlotLock, error) {
			return s.TryAcquireSlot(ctx, "pub", "h", 2, WithGuard(guards(g)...))
		}, func(g int) bool { return takes[0][g] }},
		{"AcquireSlot", func(ctx context.Context, g int) (*SlotLock, error) {
			return s.AcquireSlot(ctx, "pub", "h", 2, WithGuard(guards(g)...))
		}, func(g int) bool { return takes[0][g] && takes[1][g] }},
	} {
		n := most(call.etcd)
		want := fmt.Sprintf("at most %d guards fit in a slot's grant at the server's limit of %d operations", n, maxOps)
		// One line per call and kind of failure: the guard counts, and the
		// first such answer.
		var wrong, unsaid []int
		var firstWrong, firstUnsaid string
		for g := 0; g <= maxOps+1; g++ {
			l, err := call.take(c, g)
			refused := errors.Is(err, ErrInvalid)
			switch {
			case refused == call.etcd(g):
				if wrong = append(wrong, g); firstWrong == "" {
					firstWrong = fmt.Sprintf("with %d guards: %v, etcd takes its grants: %v", g, err, call.etcd(g))
				}
			case refused && !strings.Contains(err.Error(), want):
				if unsaid = append(unsaid, g); firstUnsaid == "" {
					firstUnsaid = fmt.Sprintf("with %d guards: %v", g, err)
				}
			case err != nil && !refused:
				t.Errorf("%s with %d guards = %v, want a slot", call.name, g, err)
			}
			if l != nil {
				if err := l.Release(c); err != nil {
					t.Fatalf("Release = %v", err)
				}
			}
		}
		if len(wrong) > 0 {
			t.Errorf("%s at --max-txn-ops %d: the up-front check disagrees with etcd for guard counts %v (first %s); it must refuse exactly what etcd refuses", call.name, maxOps, wrong, firstWrong)
		}
		if len(unsaid) > 0 {
			t.Errorf("%s at --max-txn-ops %d: the refusals of guard counts %v do not say %q (first %s)", call.name, maxOps, unsaid, want, firstUnsaid)
		}
	}
}
