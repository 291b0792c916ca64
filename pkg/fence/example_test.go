package fence_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/pkg/fence"
	"github.com/lockwarden/lockwarden/pkg/lease"
)

// A resource server admits a write only with a token at least as new as
// any it has seen. Call Admit under the same lock as the write.
func ExampleMonotonic() {
	var m fence.Monotonic
	fmt.Println(m.Admit("worker-a", 41)) // the holder writes
	fmt.Println(m.Admit("worker-b", 57)) // a new holder writes: the fence rises
	err := m.Admit("worker-a", 41)       // the old holder wakes up from a pause
	fmt.Println(err, errors.Is(err, fence.ErrStale))
	fmt.Println(m.Admit("worker-c", 57)) // a twin with the same token
	// Output:
	// <nil>
	// <nil>
	// token 41 is stale: current token is 57 true
	// token 57 is in use by another writer
}

func ExamplePut() {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	ctx := context.Background()
	eng := lease.NewEngine(cli, lease.WithPrefix("/examples/fence"))
	s, err := eng.NewSession(ctx, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)
	l, err := s.Acquire(ctx, "config-writer", "worker-a")
	if err != nil {
		log.Fatal(err)
	}

	// Applies only while the lock is this grant, checked in the same
	// transaction as the write.
	if _, err := fence.Put(ctx, l, "/examples/fence/config", "v2"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("written under token:", fence.Check(ctx, eng, "config-writer", l.Token()) == nil)

	_ = l.Release(ctx)
	_, err = fence.Put(ctx, l, "/examples/fence/config", "v3")
	fmt.Println("after release:", errors.Is(err, lease.ErrNotHeld))
	// Output:
	// written under token: true
	// after release: true
}
