package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// tracer prints the worker's lines: "<RFC 3339 UTC time with nanoseconds> <pod>: <text>", one
// line per event, in the order they happened.
type tracer struct {
	mu   sync.Mutex
	out  io.Writer
	name string
}

func newTracer(out io.Writer, name string) *tracer { return &tracer{out: out, name: name} }

// printf prints one line, stamped with the time of the call.
func (t *tracer) printf(format string, args ...any) {
	at := time.Now().UTC().Format(time.RFC3339Nano)
	t.mu.Lock()
	defer t.mu.Unlock()
	fmt.Fprintf(t.out, "%s %s: %s\n", at, t.name, fmt.Sprintf(format, args...))
}

// logger is pkg/leadership's logger for the elector: its Info lines (the term led and
// stopped, the grant seen, the release sent and answered) as the tracer's lines.
func (t *tracer) logger() logr.Logger {
	return funcr.New(func(_, args string) { t.printf("leadership: %s", args) }, funcr.Options{})
}

// signalName names the signal that stops the worker.
func signalName(sig os.Signal) string {
	if sig == syscall.SIGTERM {
		return "SIGTERM"
	}
	if sig == os.Interrupt {
		return "SIGINT"
	}
	return sig.String()
}
