package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// dial connects to the etcd the examples share (started by TestMain).
func dial() *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	return cli
}

func ExampleSession_TryAcquire() {
	cli := dial()
	defer cli.Close()
	ctx := context.Background()
	eng := lease.NewEngine(cli, lease.WithPrefix("/examples/try"))

	s, err := eng.NewSession(ctx, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)
	l, err := s.TryAcquire(ctx, "reports", "worker-1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-1 holds the lock:", l.Valid())

	other, err := eng.NewSession(ctx, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close(ctx)
	_, err = other.TryAcquire(ctx, "reports", "worker-2")
	var held *lease.HeldError
	if errors.As(err, &held) {
		fmt.Printf("worker-2 got ErrLocked: %v; held by %s, same token: %v\n",
			errors.Is(err, lease.ErrLocked), held.Holder, held.Token == l.Token())
	}
	// Output:
	// worker-1 holds the lock: true
	// worker-2 got ErrLocked: true; held by worker-1, same token: true
}

func ExampleSession_Acquire() {
	cli := dial()
	defer cli.Close()
	ctx := context.Background()
	eng := lease.NewEngine(cli, lease.WithPrefix("/examples/acquire"))
	s1, _ := eng.NewSession(ctx, 10*time.Second)
	defer s1.Close(ctx)
	s2, _ := eng.NewSession(ctx, 10*time.Second)
	defer s2.Close(ctx)

	first, err := s1.Acquire(ctx, "ledger", "worker-1")
	if err != nil {
		log.Fatal(err)
	}
	got := make(chan *lease.Lock)
	go func() {
		l, err := s2.Acquire(ctx, "ledger", "worker-2") // queues behind worker-1
		if err != nil {
			log.Fatal(err)
		}
		got <- l
	}()
	for h, _ := eng.Inspect(ctx, "ledger"); h.Waiters == 0; h, _ = eng.Inspect(ctx, "ledger") {
		time.Sleep(10 * time.Millisecond) // until worker-2 is queued
	}

	// Act only while valid, with the token; stop when the lock is lost.
	if first.Valid() {
		fmt.Println("worker-1 writes with its token")
	}
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}
	second := <-got
	fmt.Println("worker-2 holds it, with a larger token:", second.Token() > first.Token())
	fmt.Println("worker-1 released:", errors.Is(context.Cause(first.Context()), lease.ErrReleased))
	// Output:
	// worker-1 writes with its token
	// worker-2 holds it, with a larger token: true
	// worker-1 released: true
}

func ExampleLock_Update() {
	cli := dial()
	defer cli.Close()
	ctx := context.Background()
	eng := lease.NewEngine(cli, lease.WithPrefix("/examples/update"))
	s, _ := eng.NewSession(ctx, 10*time.Second)
	defer s.Close(ctx)

	// A controller's election lock guards every write it makes for others.
	election, err := s.TryAcquire(ctx, "_controller", "replica-a")
	if err != nil {
		log.Fatal(err)
	}
	guard := lease.WithGuard(election.IsOwner())
	grant, err := s.TryAcquire(ctx, "shop/payments", "pod-uid-1", guard,
		lease.WithRecord(json.RawMessage(`{"phase":"Held"}`)))
	if err != nil {
		log.Fatal(err)
	}
	if err := grant.Update(ctx, json.RawMessage(`{"phase":"Releasing"}`), guard); err != nil {
		log.Fatal(err)
	}
	h, _ := eng.Inspect(ctx, "shop/payments")
	fmt.Println(h.Holder, string(h.Record))

	_ = election.Release(ctx) // the replica is deposed
	err = grant.Update(ctx, json.RawMessage(`{"phase":"Held"}`), guard)
	fmt.Println(errors.Is(err, lease.ErrGuardFailed))
	// Output:
	// pod-uid-1 {"phase":"Releasing"}
	// true
}

func ExampleEngine_ResumeSession() {
	cli := dial()
	defer cli.Close()
	ctx := context.Background()
	eng := lease.NewEngine(cli, lease.WithPrefix("/examples/resume"))

	before, _ := eng.NewSession(ctx, 10*time.Second)
	l, err := before.TryAcquire(ctx, "singleton", "pod-1")
	if err != nil {
		log.Fatal(err)
	}
	id, token := before.ID(), l.Token()
	before.Orphan() // the process restarts; the lease and key stay

	after, err := eng.ResumeSession(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	defer after.Close(ctx)
	adopted, err := after.Adopt(ctx, "singleton", token)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same token:", adopted.Token() == token, "valid:", adopted.Valid())
	// Output:
	// same token: true valid: true
}

func ExampleEngine_ForceRelease() {
	cli := dial()
	defer cli.Close()
	ctx := context.Background()
	eng := lease.NewEngine(cli, lease.WithPrefix("/examples/force"))
	stuck, _ := eng.NewSession(ctx, 10*time.Second)
	defer stuck.Close(ctx)
	l, err := stuck.TryAcquire(ctx, "batch", "node-7")
	if err != nil {
		log.Fatal(err)
	}

	// An operator decides node-7 is gone.
	if err := eng.ForceRelease(ctx, "batch", l.Token()); err != nil {
		log.Fatal(err)
	}
	<-l.Done()
	fmt.Println("node-7 lost it:", errors.Is(l.Err(), lease.ErrNotHeld))

	// The next holder waits out node-7's TTL (a lock-delay).
	next, _ := eng.NewSession(ctx, 10*time.Second)
	defer next.Close(ctx)
	_, err = next.TryAcquire(ctx, "batch", "node-8")
	h, _ := eng.Inspect(ctx, "batch")
	fmt.Println("node-8 locked out:", errors.Is(err, lease.ErrLocked), "lock-delay:", h.LockDelay)
	// Output:
	// node-7 lost it: true
	// node-8 locked out: true lock-delay: true
}
