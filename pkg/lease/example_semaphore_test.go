package lease_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

func ExampleSession_AcquireSlot() {
	cli := dial()
	defer cli.Close()
	ctx := context.Background()
	eng := lease.NewEngine(cli, lease.WithPrefix("/examples/semaphore"))
	const slots = 2 // at most two workers export at once
	var held []*lease.SlotLock
	for _, worker := range []string{"worker-1", "worker-2"} {
		s, err := eng.NewSession(ctx, 10*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		defer s.Close(ctx)
		l, err := s.AcquireSlot(ctx, "exports", worker, slots)
		if err != nil {
			log.Fatal(err)
		}
		// Pass l.Token() to the slot's resource; stop when l.Done() closes.
		fmt.Printf("%s holds slot %d (lock %q)\n", worker, l.Index(), l.Key())
		held = append(held, l)
	}

	third, _ := eng.NewSession(ctx, 10*time.Second)
	defer third.Close(ctx)
	_, err := third.TryAcquireSlot(ctx, "exports", "worker-3", slots)
	fmt.Println("worker-3 now:", errors.Is(err, lease.ErrLocked))

	got := make(chan *lease.SlotLock)
	go func() {
		l, err := third.AcquireSlot(ctx, "exports", "worker-3", slots) // queues
		if err != nil {
			log.Fatal(err)
		}
		got <- l
	}()
	time.Sleep(100 * time.Millisecond) // let worker-3 queue (not needed for correctness)
	if err := held[1].Release(ctx); err != nil {
		log.Fatal(err)
	}
	l := <-got
	fmt.Printf("worker-3 holds slot %d, with a larger token than its last holder: %v\n",
		l.Index(), l.Token() > held[1].Token())
	// Output:
	// worker-1 holds slot 0 (lock "exports")
	// worker-2 holds slot 1 (lock "exports/slot/1")
	// worker-3 now: true
	// worker-3 holds slot 1, with a larger token than its last holder: true
}
