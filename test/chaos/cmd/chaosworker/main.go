// Command chaosworker is the fault-injection suite's workload: the fenced-worker example's
// loop (pkg/leadership, then the ledger with the term's token, Valid() checked right before
// each write), recording every term and every write with CLOCK_MONOTONIC times in a history
// file the harness checks. Between the Valid() check and the write it waits --write-gap, the
// window in which a pause (SIGSTOP, GC) turns a valid write into a stale one that only the
// fence can refuse; the harness can also stall one write there on purpose (stall.go).
//
// Its writer ID is the process's, "<POD_UID>/<incarnation>" (pkg/fence/writer), so that a
// restarted process is another writer; a fence raise or write refused for its own token
// (another writer presented it first: the pod's previous process) ends the term for this
// process (Elector.Abandon), as in the fenced-worker example.
//
// On a lock of several slots (spec.slots) each slot has a ledger of its own: LEDGER_URLS
// lists them, slot 0's first, and a term writes to its slot's (leadership.SlotOf), recording
// the slot with every event of the term.
//
// Environment: POD_UID, POD_NAME, LOCK_NAMESPACE, LOCK_NAME, LEDGER_URL (or LEDGER_URLS,
// comma-separated, one per slot), KUBECONFIG.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/lockwarden/lockwarden/examples/fenced-worker/ledger"
	"github.com/lockwarden/lockwarden/pkg/fence/writer"
	"github.com/lockwarden/lockwarden/pkg/leadership"
	"github.com/lockwarden/lockwarden/test/chaos"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	probe := flag.String("probe-address", "127.0.0.1:0", "address of /readyz")
	history := flag.String("history", "", "file to append the history to (required)")
	every := flag.Duration("write-interval", 100*time.Millisecond, "time between ledger writes while leading")
	gap := flag.Duration("write-gap", 30*time.Millisecond, "wait between the Valid() check and the write")
	engine := flag.Bool("engine", false, "hold the lock with pkg/lease directly (ETCD_ENDPOINTS, ETCD_PREFIX) instead of pkg/leadership")
	mode := flag.String("mode", chaos.WorkerElector, "elector: lead with a leadership.Elector; resourcelock: a controller-runtime manager elected through leadership.ResourceLock")
	child := flag.Bool("child", false, "run as lockwarden-agent exec's child: write with LOCKWARDEN_TOKEN and LOCKWARDEN_WRITER until SIGTERM")
	ttl := flag.Duration("ttl", 3*time.Second, "with --engine: the session TTL")
	flag.Parse()
	lock, ledgerURL := os.Getenv("LOCK_NAME"), os.Getenv("LEDGER_URL")
	urls := []string{ledgerURL}
	if l := os.Getenv("LEDGER_URLS"); l != "" {
		urls = strings.Split(l, ",")
		ledgerURL = urls[0]
	}
	if lock == "" || ledgerURL == "" || *history == "" {
		return errors.New("LOCK_NAME, LEDGER_URL (or LEDGER_URLS) and --history must be set")
	}
	f, err := os.OpenFile(*history, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if *child {
		return runChild(f, *every, *gap, ledgerURL)
	}
	uid := os.Getenv("POD_UID")
	w := &worker{
		out: f, every: *every, gap: *gap, uid: uid, writer: writer.Of(uid), urls: urls,
		http: &http.Client{Timeout: time.Second}, stall: &stallHook{},
	}
	w.record(chaos.Event{Kind: chaos.EvWriter, Writer: w.writer, Mono: chaos.Mono()})
	if *engine {
		return w.runEngine(ctx, *probe, lock, *ttl)
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	if *mode == chaos.WorkerResourceLock {
		return w.runManager(ctx, cfg, *probe, lock)
	}
	var e *leadership.Elector // set before Run calls back
	e, err = leadership.New(leadership.Config{
		Config: cfg, Namespace: os.Getenv("LOCK_NAMESPACE"), Lock: lock,
		Callbacks: leadership.Callbacks{OnStartedLeading: func(ctx context.Context, token int64) {
			w.lead(ctx, token, int32(leadership.SlotOf(ctx)), cmp.Or(leadership.WriterOf(ctx), w.writer), e, e.Abandon)
		}},
	})
	if err != nil {
		return err
	}
	if e.Writer() != w.writer {
		return fmt.Errorf("the elector presents writer %s, the history records %s", e.Writer(), w.writer)
	}
	defer w.serve(*probe, e.ReadyzCheck)()
	return e.Run(ctx)
}

// serve serves /readyz from check, and the stall hook, on addr; the returned func stops it.
func (w *worker) serve(addr string, check func(*http.Request) error) func() {
	mux := http.NewServeMux()
	w.stall.register(mux)
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, r *http.Request) {
		if err := check(r); err != nil {
			http.Error(rw, err.Error(), http.StatusServiceUnavailable)
			return
		}
		rw.WriteHeader(http.StatusOK)
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.ListenAndServe() // ErrServerClosed after Close below
	}()
	return func() {
		_ = srv.Close()
		<-served
	}
}

// validity is what tells a leader it may still write: a leadership.Elector or a lease.Lock.
type validity interface {
	Valid() bool
	ValidUntil() time.Time
}

// worker writes to the ledger while it leads and records what it did.
type worker struct {
	out    *os.File
	every  time.Duration
	gap    time.Duration
	uid    string
	writer string   // writer.Of(uid): this process's writer ID
	urls   []string // the ledgers, one per lock slot
	http   *http.Client
	stall  *stallHook

	mu  sync.Mutex
	ids int
}

// record appends one event in a single write, so that a SIGKILL tears at most the last line.
func (w *worker) record(e chaos.Event) {
	b, _ := json.Marshal(e) // a plain struct: cannot fail
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.out.Write(append(b, '\n'))
}

// lead raises the fence at slot's ledger, then appends with the token, presenting writer,
// until the term ends or the ledger refuses the token. A slot the worker has no ledger for
// ends the term at once (the history names the slot: chaos.BySlot reports it). A refusal for this very token (the ledger's highest,
// presented first by another writer: the pod's previous process) ends the term for this
// process: abandon (nil for a holder that has no other process under its identity). v nil
// (lockwarden-agent's child) knows no validity: it writes until its context ends, and its
// calls carry no deadline.
func (w *worker) lead(ctx context.Context, token int64, slot int32, writer string, v validity, abandon func(int64)) {
	w.record(chaos.Event{Kind: chaos.EvStart, Slot: slot, Token: token, Mono: chaos.Mono(), Writer: writer})
	defer func() { w.record(chaos.Event{Kind: chaos.EvEnd, Slot: slot, Token: token, Mono: chaos.Mono()}) }()
	if slot < 0 || int(slot) >= len(w.urls) {
		logf("term %d in slot %d: no ledger for that slot (%d ledgers)", token, slot, len(w.urls))
		return
	}
	url := w.urls[slot]
	op := "fence"
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		if v != nil && !v.Valid() {
			return
		}
		now := chaos.Mono()
		var until int64
		if v != nil {
			if until = now + int64(time.Until(v.ValidUntil())); until <= now {
				return
			}
		}
		time.Sleep(w.gap) // deliberately not cancellable: a pause between check and write
		stalled := w.stall.wait(token)
		w.mu.Lock()
		w.ids++
		id := w.ids
		w.mu.Unlock()
		w.record(chaos.Event{Kind: chaos.EvCall, Slot: slot, ID: id, Op: op, Token: token, Mono: chaos.Mono(), Until: until, Stalled: stalled})
		res, highest := w.write(ctx, url, op, token, writer)
		w.record(chaos.Event{Kind: chaos.EvReturn, Slot: slot, ID: id, Op: op, Token: token, Mono: chaos.Mono(), Result: res, Highest: highest})
		if stalled {
			w.stall.done(res)
		}
		switch res {
		case chaos.ResultStale:
			if highest == token && abandon != nil {
				abandon(token)
				w.record(chaos.Event{Kind: chaos.EvAbandon, Slot: slot, Token: token, Mono: chaos.Mono()})
				logf("abandoned token %d: the ledger admitted it from another writer first", token)
			}
			return
		case chaos.ResultOK:
			op = "append"
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// write sends one fence or append to the ledger at url and classifies the reply. It is not
// cancelled with the term: a write in flight is the case the fence exists for.
func (w *worker) write(ctx context.Context, url, op string, token int64, writer string) (string, int64) {
	body, _ := json.Marshal(ledger.Write{Writer: writer, Token: token, Entry: fmt.Sprintf("%s@%d", op, token)})
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodPost, url+"/"+op, bytes.NewReader(body))
	if err != nil {
		return chaos.ResultError, 0
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.http.Do(req)
	if err != nil {
		return chaos.ResultError, 0
	}
	defer resp.Body.Close()
	var rep ledger.Reply
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		return chaos.ResultError, 0
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return chaos.ResultOK, rep.Highest
	case http.StatusConflict:
		return chaos.ResultStale, rep.Highest
	}
	return chaos.ResultError, 0
}
