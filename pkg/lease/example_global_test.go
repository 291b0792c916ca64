package lease_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// A manager elected by its engine's lock takes the first grant of a global name, confirms
// it, renews its lease once, and ends it. Every global call carries the election's compare.
func ExampleGlobal() {
	cli := dial()
	defer cli.Close()
	ctx := context.Background()

	eng := lease.NewEngine(cli, lease.WithPrefix("/examples/global-engine"))
	s, err := eng.NewSession(ctx, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(ctx)
	election, err := s.TryAcquire(ctx, "manager", "replica-0")
	if err != nil {
		log.Fatal(err)
	}

	g, err := lease.NewGlobal(cli, "/examples/global")
	if err != nil {
		log.Fatal(err)
	}
	east := lease.ClusterID{Name: "east", UID: "kube-system-uid-of-east"}
	if err := g.Register(ctx, east, eng.Prefix()); err != nil {
		log.Fatal(err)
	}

	name := fmt.Sprintf("payments-%d", time.Now().UnixNano()) // a name never used before
	v, err := g.Observe(ctx, name)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", v.Held, "ever granted:", v.TCreate != 0)

	req := lease.GlobalGrantRequest{
		Basis:  lease.GrantFirst, // T was never written (R6')
		Record: lease.GlobalRecord{Cluster: east, Object: "lock-object-uid", Holder: "pod-0", HolderUID: "pod-0-uid", DelaySeconds: 30},
		TTL:    15 * time.Second,
	}
	token, leaseID, err := g.Grant(ctx, name, req, election.IsOwner())
	if err != nil {
		log.Fatal(err)
	}
	held, err := g.Confirm(ctx, name, token, election.IsOwner())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("confirmed:", held)

	rctx, cancel := context.WithTimeout(ctx, 5*time.Second) // below the round cadence
	ttl, err := g.Renew(rctx, leaseID)
	cancel()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("renewed for", ttl)

	deleted, err := g.Delete(ctx, name, token, leaseID, election.IsOwner())
	if err != nil {
		log.Fatal(err)
	}
	v, err = g.Observe(ctx, name)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted:", deleted, "held:", v.Held, "T at the token:", v.TMod == token)
	// Output:
	// held: false ever granted: false
	// confirmed: true
	// renewed for 15s
	// deleted: true held: false T at the token: true
}
