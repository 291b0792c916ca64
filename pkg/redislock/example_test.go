package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwarden/lockwarden/pkg/fence"
	"github.com/lockwarden/lockwarden/pkg/redislock"
)

// Acquire a lock, write to a fenced resource with its token, release.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	locks, err := redislock.New(rdb, redislock.Config{TTL: 10 * time.Second, Prefix: "example"})
	if err != nil {
		log.Fatal(err)
	}
	defer locks.Close(ctx)

	// The resource remembers the highest token it accepted (persist it with
	// the data in a real resource; see package fence for the SQL form).
	var ledger fence.Monotonic

	l, err := locks.Acquire(ctx, "payments", "worker-1") // waits in FIFO order
	if err != nil {
		log.Fatal(err)
	}
	// Act only while Valid(), pass the token with every write, stop when
	// l.Done() closes (or use l.Context()).
	if l.Valid() {
		fmt.Println("write:", ledger.Admit("worker-1", l.Token()))
	}
	if err := l.Release(ctx); err != nil {
		log.Fatal(err)
	}

	next, err := locks.TryAcquire(ctx, "payments", "worker-2")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("next token is larger:", next.Token() > l.Token())
	fmt.Println("write:", ledger.Admit("worker-2", next.Token()))
	// worker-1, back from a pause, is refused by the resource.
	err = ledger.Admit("worker-1", l.Token())
	fmt.Println("late write refused:", errors.Is(err, fence.ErrStale))
	_ = next.Release(ctx)
	// Output:
	// write: <nil>
	// next token is larger: true
	// write: <nil>
	// late write refused: true
}
