package leadership_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"time"

	"k8s.io/client-go/rest"

	"github.com/lockwarden/lockwarden/pkg/fence"
	"github.com/lockwarden/lockwarden/pkg/fence/writer"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// Example runs a pod's work while it holds the lock "payments-leader". The pod gets POD_UID
// and POD_NAME from the downward API, needs get, list, watch and patch on distributedlocks
// (ClusterRole lockwarden-lock-reader), and serves ReadyzCheck as its readinessProbe. On
// SIGINT, Run cancels the work, waits for it to return, then confirms the release, so the
// next candidate is granted without the lock delay. It needs a cluster, so it only compiles
// here.
func Example() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var el *leadership.Elector
	el, err = leadership.New(leadership.Config{
		Config:    cfg,
		Namespace: "shop",
		Lock:      "payments-leader",
		// OnStartedLeading below works for the whole term and returns once it stopped.
		ReleaseOnStop: true,
		// Identity and Name default to $POD_UID and $POD_NAME.
		Callbacks: leadership.Callbacks{
			OnStartedLeading: func(ctx context.Context, token int64) {
				// First raise the fence to token at every resource this term reads from,
				// then work; check Valid() right before each write and send the token.
				for ctx.Err() == nil {
					if !el.Valid() {
						return
					}
					fmt.Println("write with fencing token", token)
					time.Sleep(time.Second)
				}
			},
			OnStoppedLeading: func() { fmt.Println("stopped leading") },
			OnNewHolder:      func(holder string, token int64) { fmt.Println("holder", holder, "token", token) },
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}

	http.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := el.ReadyzCheck(r); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	go func() { _ = http.ListenAndServe(":8081", nil) }()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := el.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
}

// ExampleElector_Release hands the lock over before a planned shutdown (e.g. from a preStop
// hook): the work stops, then the controller is told, then the process exits.
func ExampleElector_Release() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	el, err := leadership.New(leadership.Config{Config: cfg, Namespace: "shop", Lock: "payments-leader"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, stop := context.WithCancel(context.Background())
	go func() { _ = el.Run(ctx) }()

	// ... later, before exiting:
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := el.Release(rctx); err != nil {
		// The term then ends the slow way: Releasing and the lock delay.
		fmt.Fprintln(os.Stderr, err)
	}
	stop()
}

// ExampleElector_Abandon raises the fence with the token and this process's writer ID before
// the term's work, and gives the term up when the resource admitted that token from another
// writer first: this pod's previous process, whose writes may still arrive.
func ExampleElector_Abandon() {
	res := &fence.Monotonic{} // the resource's admit check, normally in another process
	// The pod's previous process raised the fence with token 12 before its container restarted.
	_ = res.Admit(writer.ID("1f0c7a52-0000-4000-8000-000000000001", writer.NewIncarnation()), 12)

	el, err := leadership.New(leadership.Config{
		Config: &rest.Config{Host: "https://127.0.0.1:6443"}, Namespace: "shop", Lock: "payments-leader",
		Identity: "1f0c7a52-0000-4000-8000-000000000001",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	lead := func(_ context.Context, token int64) {
		var se *fence.StaleError
		switch err := res.Admit(el.Writer(), token); {
		case errors.As(err, &se) && se.Current == token:
			el.Abandon(token) // no work, no release; never this token again
			fmt.Println("abandoned term", token)
			return
		case err != nil:
			fmt.Println("stale:", err) // a newer term has begun
			return
		}
		fmt.Println("fence raised with token", token)
		// ... the term's work, with el.Writer() and token on every write
	}
	lead(context.Background(), 12) // as OnStartedLeading would be called
	lead(context.Background(), 15) // the controller's next grant
	fmt.Println(el.Valid())
	// Output:
	// abandoned term 12
	// fence raised with token 15
	// false
}

// ExampleNew shows that New names the field it refuses.
func ExampleNew() {
	_, err := leadership.New(leadership.Config{
		Config:    &rest.Config{Host: "https://127.0.0.1:6443"},
		Namespace: "shop",
		Lock:      "payments-leader",
		Identity:  "1f0c7a52-0000-4000-8000-000000000001",
		Margin:    -time.Second,
	})
	fmt.Println(err)
	// Output: leadership: invalid config: Margin: -1s is negative
}

// ExampleDefaultMargin prints the margin of a few term leases.
func ExampleDefaultMargin() {
	for _, lease := range []time.Duration{2 * time.Second, 15 * time.Second, time.Hour} {
		fmt.Println(lease, leadership.DefaultMargin(lease))
	}
	// Output:
	// 2s 500ms
	// 15s 2s
	// 1h0m0s 1m12s
}

// ExampleSlotOf leads one slot of the lock "shards", a lock of spec.slots 4: each of up to
// four pods holds a slot and works on the shard of that number, with its slot's token. Tokens
// of different slots are not ordered with each other, so each shard keeps a fence of its own.
// It needs a cluster, so it only compiles here.
func ExampleSlotOf() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	var el *leadership.Elector
	el, err = leadership.New(leadership.Config{
		Config: cfg, Namespace: "shop", Lock: "shards",
		Callbacks: leadership.Callbacks{
			OnStartedLeading: func(ctx context.Context, token int64) {
				shard := leadership.SlotOf(ctx) // 0 to 3; 0 for a one-slot lock
				for ctx.Err() == nil && el.Valid() {
					fmt.Println("write shard", shard, "with fencing token", token, "writer", leadership.WriterOf(ctx))
					time.Sleep(time.Second)
				}
			},
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	_ = el.Run(ctx)
}
