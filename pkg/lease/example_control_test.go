package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// A controller grants keys on one shared session on behalf of holders,
// tracking nothing per key, and releases by token; a stale token changes
// nothing.
func ExampleSession_Grant() {
	cli := dial()
	defer cli.Close()
	ctx := context.Background()
	eng := lease.NewEngine(cli, lease.WithPrefix("/examples/grant"))
	grants, err := eng.NewSession(ctx, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer grants.Close(ctx)

	token, err := grants.Grant(ctx, "shop/payments", "pod-uid-1", lease.WithRecord(json.RawMessage(`{"phase":"Held"}`)))
	if errors.Is(err, lease.ErrUnknownOutcome) {
		// The answer was lost: read again (Inspect) before deciding.
		log.Fatal(err)
	}
	if err != nil {
		log.Fatal(err)
	}
	if err := eng.UpdateRecord(ctx, "shop/payments", token, json.RawMessage(`{"phase":"Releasing"}`)); err != nil {
		log.Fatal(err)
	}
	h, err := eng.Inspect(ctx, "shop/payments")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("held by %s, same token: %v, record %s\n", h.Holder, h.Token == token, h.Record)
	fmt.Println("stale token:", errors.Is(eng.Release(ctx, "shop/payments", token-1), lease.ErrNotHeld))
	fmt.Println("release:", eng.Release(ctx, "shop/payments", token))
	// Output:
	// held by pod-uid-1, same token: true, record {"phase":"Releasing"}
	// stale token: true
	// release: <nil>
}

// One watch reports every change of every lock by name; resync asks the
// caller to re-read everything (after the watch started, and after it failed).
func ExampleEngine_WatchLocks() {
	cli := dial()
	defer cli.Close()
	eng := lease.NewEngine(cli, lease.WithPrefix("/examples/watch"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	started := make(chan struct{})
	changed := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		var once bool
		done <- eng.WatchLocks(ctx, func(key string) { changed <- key }, func() {
			if !once {
				once = true
				close(started)
			}
		})
	}()
	<-started
	s, err := eng.NewSession(ctx, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(context.Background())
	token, err := s.Grant(ctx, "ns/a", "uid-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("changed:", <-changed)
	if err := eng.Release(ctx, "ns/a", token); err != nil {
		log.Fatal(err)
	}
	fmt.Println("changed:", <-changed)
	cancel()
	fmt.Println("watch ended:", <-done)
	// Output:
	// changed: ns/a
	// changed: ns/a
	// watch ended: context canceled
}
