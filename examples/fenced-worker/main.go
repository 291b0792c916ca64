// Command fenced-worker is the lockwarden example workload. As a worker it follows its
// DistributedLock with pkg/leadership and, while leading, raises the fence at the ledger and
// then appends entries carrying its fencing token and the term's writer ID (pod UID and an
// incarnation drawn for the term), checking Valid() right before each write. By default it confirms the end of
// each term to the controller once its work stopped (--release-on-stop). As
// `fenced-worker ledger` it is the fenced resource: an HTTP ledger that refuses stale tokens
// (`fenced-worker ledger --shards N`: N shards, each fenced on its own).
//
// On a lock with spec.slots > 1, --shard-per-slot makes the worker write to the shard of the
// slot it holds (leadership.SlotOf): slot i owns shard i, and every write to shard i carries
// slot i's token (docs/slots.md).
//
// Each line the worker prints starts with the wall-clock time (RFC 3339, UTC, nanoseconds),
// so one handoff can be traced across pods: the signal received, the work stopped, the
// release sent and answered (pkg/leadership's log lines), the grant seen, the term led, the
// fence raised, the first write accepted.
//
// Worker environment: POD_UID and POD_NAME (downward API), LOCK_NAMESPACE (default
// POD_NAMESPACE, then "default"), LOCK_NAME, LEDGER_URL; the API server from in-cluster
// config or KUBECONFIG.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	lockv1 "github.com/lockwarden/lockwarden/api/v1alpha1"
	"github.com/lockwarden/lockwarden/examples/fenced-worker/ledger"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

func main() {
	ctx, stop := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	tr := newTracer(os.Stdout, os.Getenv("POD_NAME"))
	go func() {
		if sig, ok := <-signals; ok {
			tr.printf("%s received", signalName(sig))
			stop()
		}
	}()
	var err error
	if len(os.Args) > 1 && os.Args[1] == "ledger" {
		err = runLedger(ctx, os.Args[2:])
	} else {
		err = runWorker(ctx, tr, os.Args[1:])
	}
	signal.Stop(signals)
	close(signals)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fenced-worker:", err)
		os.Exit(1)
	}
}

func runLedger(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ledger", flag.ContinueOnError)
	listen := fs.String("listen", ":8090", "address to serve the ledger on")
	shards := fs.Int("shards", 0, "serve this many shards, each fenced on its own, under /shards/<i>/ (1 to 16, a shard per slot of a lock with spec.slots); 0 serves one ledger at /")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("ledger: unexpected argument %q (flags: --listen, --shards)", fs.Arg(0))
	}
	handler, err := ledgerHandler(*shards)
	if err != nil {
		return err
	}
	srv := &http.Server{Addr: *listen, Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	if *shards > 0 {
		fmt.Printf("ledger of %d shards listening on %s\n", *shards, *listen)
	} else {
		fmt.Printf("ledger listening on %s\n", *listen)
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdown); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// ledgerHandler is the ledger's handler: one ledger for shards 0, else a ledger of that many
// shards.
func ledgerHandler(shards int) (http.Handler, error) {
	switch {
	case shards == 0:
		return ledger.New().Handler(), nil
	case shards < 0 || shards > lockv1.MaxSlots:
		return nil, fmt.Errorf("ledger: --shards %d: want 0 (one ledger) or 1 to %d (a shard per slot; spec.slots is at most %d)", shards, lockv1.MaxSlots, lockv1.MaxSlots)
	}
	s, err := ledger.NewShards(shards)
	if err != nil {
		return nil, err
	}
	return s.Handler(), nil
}

func runWorker(ctx context.Context, tr *tracer, args []string) error {
	fs := flag.NewFlagSet("fenced-worker", flag.ContinueOnError)
	probe := fs.String("probe-address", ":8081", `address of /readyz and /healthz ("0" disables)`)
	every := fs.Duration("write-interval", 500*time.Millisecond, "time between ledger writes while leading")
	perSlot := fs.Bool("shard-per-slot", false, "write to the shard of the slot held (LEDGER_URL/shards/<slot>, a ledger run with --shards): for a lock with spec.slots > 1, slot i owns shard i")
	release := fs.Bool("release-on-stop", true, "confirm the end of each term (lockwarden.io/holder-release) once the work stopped, so that the next holder is granted at once instead of after the lock delay; needs patch on distributedlocks and the config/policy admission policy (--release-on-stop=false turns it off)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags: --probe-address, --write-interval, --shard-per-slot, --release-on-stop)", fs.Arg(0))
	}
	ns := firstSet(os.Getenv("LOCK_NAMESPACE"), os.Getenv("POD_NAMESPACE"), "default")
	lock, ledgerURL := os.Getenv("LOCK_NAME"), os.Getenv("LEDGER_URL")
	if lock == "" || ledgerURL == "" {
		return errors.New("LOCK_NAME and LEDGER_URL must be set")
	}
	cfg, err := restConfig()
	if err != nil {
		return err
	}
	w := &worker{ledger: &ledger.Client{URL: ledgerURL, HTTP: &http.Client{Timeout: 2 * time.Second}, Name: os.Getenv("POD_NAME")}, every: *every, perSlot: *perSlot, tr: tr}
	e, err := leadership.New(leadership.Config{
		// lead runs the work until the term ends and returns once it stopped: what
		// ReleaseOnStop needs.
		Config: cfg, Namespace: ns, Lock: lock, ReleaseOnStop: *release, Log: tr.logger(),
		Callbacks: leadership.Callbacks{
			OnStartedLeading: w.lead,
			OnStoppedLeading: func() { tr.printf("stopped leading") },
			OnNewHolder: func(holder string, token int64) {
				tr.printf("holder is %s with token %d", holder, token)
			},
		},
	})
	if err != nil {
		return err
	}
	w.elector = e
	if *probe != "0" {
		mux := http.NewServeMux()
		mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(http.StatusOK) })
		mux.HandleFunc("/readyz", func(rw http.ResponseWriter, r *http.Request) {
			if err := e.ReadyzCheck(r); err != nil {
				http.Error(rw, err.Error(), http.StatusServiceUnavailable)
				return
			}
			rw.WriteHeader(http.StatusOK)
		})
		srv := &http.Server{Addr: *probe, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		served := make(chan struct{})
		go func() {
			defer close(served)
			_ = srv.ListenAndServe() // returns ErrServerClosed after Close below
		}()
		defer func() {
			_ = srv.Close()
			<-served
		}()
	}
	return e.Run(ctx)
}

// worker writes to the ledger while it leads.
type worker struct {
	ledger  *ledger.Client
	elector *leadership.Elector
	every   time.Duration
	perSlot bool // write to the held slot's shard of the ledger
	tr      *tracer
}

// lead is OnStartedLeading: raise the fence first, then write with the token, checking
// Valid() right before each write, until the term ends or the ledger refuses the token. The
// work starts only once the fence raise is admitted; a raise refused because another writer
// (this pod's previous process) presented the token first ends the term for this process.
//
// The writer ID is the term's (leadership.WriterOf): a token led again by this process after
// its term lapsed is presented by another writer than the call before, whose writes may still
// be on their way, so the ledger refuses the raise and the term is abandoned.
//
// With perSlot the term is one slot's (leadership.SlotOf) and every write goes to that slot's
// shard: the shard's fence sees only that slot's tokens.
func (w *worker) lead(ctx context.Context, token int64) {
	wr := leadership.WriterOf(ctx)
	lg := w.ledger
	if w.perSlot {
		slot := leadership.SlotOf(ctx)
		lg = w.ledger.Shard(slot)
		w.tr.printf("leading slot %d with token %d as writer %s: writing to shard %d", slot, token, wr, slot)
	} else {
		w.tr.printf("leading with token %d as writer %s", token, wr)
	}
	defer w.tr.printf("work stopped under token %d", token)
	if !w.raise(ctx, lg, wr, token) {
		return
	}
	t := time.NewTicker(w.every)
	defer t.Stop()
	first := true
	for seq := 1; ; seq++ {
		if !w.elector.Valid() {
			return
		}
		err := lg.Append(ctx, wr, token, fmt.Sprintf("%s #%d", w.tr.name, seq))
		switch {
		case err == nil && first:
			first = false
			w.tr.printf("first write accepted with token %d", token)
		case errors.Is(err, ledger.ErrStale):
			w.tr.printf("ledger refused token %d: %v", token, err)
			w.abandonIfTaken(token, err)
			return
		case err != nil && ctx.Err() == nil:
			w.tr.printf("write: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// raise raises the fence at lg with token as writer wr, trying again every write
// interval while the ledger cannot be reached and the term lasts. It reports whether the raise
// was admitted.
func (w *worker) raise(ctx context.Context, lg *ledger.Client, wr string, token int64) bool {
	for {
		if !w.elector.Valid() {
			return false
		}
		err := lg.Fence(ctx, wr, token)
		if err == nil {
			w.tr.printf("fence raised with token %d: admitted", token)
			return true
		}
		w.tr.printf("raise fence with token %d: %v", token, err)
		if errors.Is(err, ledger.ErrStale) {
			w.abandonIfTaken(token, err)
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(w.every):
		}
	}
}

// abandonIfTaken ends the term of token for this process when the ledger refused it because
// another writer presented it first: never lead it again, never release it.
func (w *worker) abandonIfTaken(token int64, err error) {
	if errors.Is(err, ledger.ErrOtherWriter) {
		w.elector.Abandon(token)
		w.tr.printf("term of token %d abandoned: another writer presented it first", token)
	}
}

func restConfig() (*rest.Config, error) {
	if cfg, err := rest.InClusterConfig(); err == nil {
		return cfg, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("no in-cluster config and no usable KUBECONFIG: %w", err)
	}
	return cfg, nil
}

func firstSet(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
