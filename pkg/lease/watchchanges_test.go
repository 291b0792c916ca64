package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// WatchLockChanges reports each change of a lock key with its revision and the key's token:
// a grant's put at the grant's token, a record update at a later revision with the same
// token, a delete with no token; queue entries and tombstones are not reported.
func TestWatchLockChanges(t *testing.T) {
	e := newEnv(t)
	eng := e.engine(e.cli)
	s := e.session(eng, 2*time.Second)
	var mu sync.Mutex
	var got []lease.LockChange
	wctx, cancel := context.WithCancel(ctx(t))
	errc := make(chan error, 1)
	resynced := make(chan struct{}, 1)
	go func() {
		errc <- eng.WatchLockChanges(wctx,
			func(c lease.LockChange) { mu.Lock(); got = append(got, c); mu.Unlock() },
			func() {
				select {
				case resynced <- struct{}{}:
				default:
				}
			})
	}()
	defer func() {
		cancel()
		if err := <-errc; !errors.Is(err, context.Canceled) {
			t.Errorf("WatchLockChanges = %v, want context.Canceled", err)
		}
	}()
	<-resynced

	token, err := s.Grant(ctx(t), "ns/a", "uid-a")
	if err != nil {
		t.Fatalf("Grant = %v", err)
	}
	if err := eng.UpdateRecord(ctx(t), "ns/a", token, json.RawMessage(`{"phase":"Releasing"}`)); err != nil {
		t.Fatalf("UpdateRecord = %v", err)
	}
	if err := eng.Release(ctx(t), "ns/a", token); err != nil {
		t.Fatalf("Release = %v", err)
	}
	eventually(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) < 3 {
			return fmt.Errorf("changes = %+v, want 3", got)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	put, update, del := got[0], got[1], got[2]
	if want := (lease.LockChange{Key: "ns/a", Revision: token, Token: token}); put != want {
		t.Errorf("grant's change = %+v, want %+v", put, want)
	}
	if update.Key != "ns/a" || update.Token != token || update.Revision <= token || update.Deleted {
		t.Errorf("record update's change = %+v, want ns/a with token %d at a later revision", update, token)
	}
	if del.Key != "ns/a" || !del.Deleted || del.Token != 0 || del.Revision <= update.Revision {
		t.Errorf("release's change = %+v, want a delete of ns/a after revision %d", del, update.Revision)
	}
	if keys := []string{put.Key, update.Key, del.Key}; len(got) != 3 || !slices.Equal(keys, []string{"ns/a", "ns/a", "ns/a"}) {
		t.Errorf("changes = %+v, want exactly those 3", got)
	}
}
