package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/lockwarden/lockwarden/test/chaos"
)

// errStale makes the child exit 1 when the ledger refused its token: that ends its term,
// and lockwarden-agent then exits with its code (the kubelet reports the pod Failed).
var errStale = errors.New("the ledger refused the token")

// runChild is --child: lockwarden-agent exec's command, a program that knows nothing of
// Kubernetes. It raises the fence and appends with LOCKWARDEN_TOKEN and LOCKWARDEN_WRITER, as
// examples/shell-worker does, until the agent stops it: SIGTERM ends its term at once (the
// history's end of its interval; the agent SIGKILLs what is left by ValidUntil - 250 ms). It
// knows no validity, so its calls carry no deadline; every child of one agent process appends
// to the agent's history.
func runChild(f *os.File, every, gap time.Duration, url string) error {
	token, err := strconv.ParseInt(os.Getenv("LOCKWARDEN_TOKEN"), 10, 64)
	if err != nil || token <= 0 {
		return errors.New("LOCKWARDEN_TOKEN is not a token")
	}
	wr := os.Getenv("LOCKWARDEN_WRITER")
	if wr == "" {
		return errors.New("LOCKWARDEN_WRITER is not set")
	}
	w := &worker{out: f, every: every, gap: gap, writer: wr, urls: []string{url}, http: &http.Client{Timeout: time.Second}, stall: &stallHook{}}
	w.record(chaos.Event{Kind: chaos.EvWriter, Writer: wr, Mono: chaos.Mono()})
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-term
		w.record(chaos.Event{Kind: chaos.EvEnd, Token: token, Mono: chaos.Mono()})
		os.Exit(0) // at once: a stopped child writes nothing more
	}()
	w.lead(context.Background(), token, 0, wr, nil, nil) // returns only when the ledger refused the token
	return errStale
}
