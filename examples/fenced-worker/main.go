// Command fenced-worker is the lockwarden example workload. As a worker it follows its
// DistributedLock with pkg/leadership and, while leading, raises the fence at the ledger and
// then appends entries carrying its fencing token, checking Valid() right before each write.
// As `fenced-worker ledger` it is the fenced resource: an HTTP ledger that refuses stale
// tokens.
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

	"github.com/lockwarden/lockwarden/examples/fenced-worker/ledger"
	"github.com/lockwarden/lockwarden/pkg/leadership"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if len(os.Args) > 1 && os.Args[1] == "ledger" {
		err = runLedger(ctx, os.Args[2:])
	} else {
		err = runWorker(ctx, os.Args[1:])
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fenced-worker:", err)
		os.Exit(1)
	}
}

func runLedger(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("ledger", flag.ContinueOnError)
	listen := fs.String("listen", ":8090", "address to serve the ledger on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	srv := &http.Server{Addr: *listen, Handler: ledger.New().Handler(), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	fmt.Printf("ledger listening on %s\n", *listen)
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

func runWorker(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("fenced-worker", flag.ContinueOnError)
	probe := fs.String("probe-address", ":8081", `address of /readyz and /healthz ("0" disables)`)
	every := fs.Duration("write-interval", 500*time.Millisecond, "time between ledger writes while leading")
	release := fs.Bool("release-on-stop", false, "confirm the end of each term (lockwarden.io/holder-release) once the work stopped, so that the next holder need not wait the lock delay; needs patch on distributedlocks and the config/policy admission policy")
	if err := fs.Parse(args); err != nil {
		return err
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
	w := &worker{ledger: &ledger.Client{URL: ledgerURL, HTTP: &http.Client{Timeout: 2 * time.Second}, Name: os.Getenv("POD_NAME")}, every: *every, name: os.Getenv("POD_NAME")}
	e, err := leadership.New(leadership.Config{
		// lead runs the work until the term ends and returns once it stopped: what
		// ReleaseOnStop needs.
		Config: cfg, Namespace: ns, Lock: lock, ReleaseOnStop: *release,
		Callbacks: leadership.Callbacks{
			OnStartedLeading: w.lead,
			OnStoppedLeading: func() { fmt.Printf("%s: stopped leading\n", w.name) },
			OnNewHolder: func(holder string, token int64) {
				fmt.Printf("%s: holder is %s with token %d\n", w.name, holder, token)
			},
		},
	})
	if err != nil {
		return err
	}
	w.elector, w.uid = e, os.Getenv("POD_UID")
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
	name    string
	uid     string
}

// lead is OnStartedLeading: raise the fence first, then write with the token, checking
// Valid() right before each write, until the term ends or the ledger refuses the token.
func (w *worker) lead(ctx context.Context, token int64) {
	fmt.Printf("%s: leading with token %d\n", w.name, token)
	if err := w.ledger.Fence(ctx, w.uid, token); err != nil {
		fmt.Printf("%s: raise fence with token %d: %v\n", w.name, token, err)
		return
	}
	t := time.NewTicker(w.every)
	defer t.Stop()
	for seq := 1; ; seq++ {
		if !w.elector.Valid() {
			return
		}
		err := w.ledger.Append(ctx, w.uid, token, fmt.Sprintf("%s #%d", w.name, seq))
		switch {
		case errors.Is(err, ledger.ErrStale):
			fmt.Printf("%s: ledger refused token %d: %v\n", w.name, token, err)
			return
		case err != nil && ctx.Err() == nil:
			fmt.Printf("%s: write: %v\n", w.name, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
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
