package leadership_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/lockwarden/lockwarden/pkg/leadership"
)

// TestRunOrDiePanicsOnInvalidConfig: RunOrDie panics with New's error, which wraps
// ErrInvalidConfig and names the field, before it touches the API server.
func TestRunOrDiePanicsOnInvalidConfig(t *testing.T) {
	valid := leadership.Config{Config: &rest.Config{Host: "https://127.0.0.1:1"}, Namespace: "shop", Lock: "payments-leader", Identity: "uid-a"}
	tests := []struct {
		name   string
		mutate func(*leadership.Config)
		field  string
	}{
		{"no lock", func(c *leadership.Config) { c.Lock = "" }, "Lock"},
		{"negative liveness timeout", func(c *leadership.Config) { c.LivenessTimeout = -time.Second }, "LivenessTimeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := valid
			tt.mutate(&cfg)
			var got any
			func() {
				defer func() { got = recover() }()
				leadership.RunOrDie(t.Context(), cfg)
			}()
			err, isErr := got.(error)
			if !isErr || !errors.Is(err, leadership.ErrInvalidConfig) {
				t.Fatalf("RunOrDie panicked with %v, want an error wrapping ErrInvalidConfig", got)
			}
			if prefix := "leadership: invalid config: " + tt.field + ":"; !strings.HasPrefix(err.Error(), prefix) {
				t.Errorf("panic %q, want it to start with %q", err, prefix)
			}
		})
	}
}

// TestRunOrDieLeadsOneTerm: RunOrDie leads one term and returns by itself when it ends, with
// OnStoppedLeading called once; a later grant to the pod is not led.
func TestRunOrDieLeadsOneTerm(t *testing.T) {
	h := newHarness(t, 30)
	cfg := h.config("pod-a", "uid-a")
	r := startRun(t, h, func(ctx context.Context) error { leadership.RunOrDie(ctx, cfg); return nil })
	h.waitReads(t, 1)
	setStatus(t, h.key, held("pod-a", "uid-a", 10, 30))
	h.rec.waitEvents(t, "holder(pod-a,10) start(10)")
	if r.returned() {
		t.Fatalf("RunOrDie returned while its term lasted")
	}
	setStatus(t, h.key, releasing)
	r.waitReturn(t, "the end of its term")
	if got, want := h.rec.String(), "holder(pod-a,10) start(10) stop"; got != want {
		t.Errorf("callbacks: got %q, want %q", got, want)
	}
	n := h.reads.okCount()
	setStatus(t, h.key, held("pod-a", "uid-a", 11, 30))
	time.Sleep(500 * time.Millisecond) // a running elector would read and start within this
	if got, want := h.rec.String(), "holder(pod-a,10) start(10) stop"; got != want || h.reads.okCount() != n {
		t.Errorf("after RunOrDie returned: callbacks %q and %d reads, want %q and %d", got, h.reads.okCount(), want, n)
	}
}

// ExampleRunOrDie is client-go's RunOrDie program on lockwarden: it leads one term, and when
// the term ends (or SIGTERM arrives) OnStoppedLeading runs once and the program exits, for
// its restart to campaign again. It needs a cluster, so it only compiles here.
func ExampleRunOrDie() {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	leadership.RunOrDie(ctx, leadership.Config{
		Config:    cfg,
		Namespace: "shop",
		Lock:      "payments-leader",
		// Identity and Name default to $POD_UID and $POD_NAME.
		Callbacks: leadership.Callbacks{
			OnStartedLeading: func(ctx context.Context, token int64) {
				// Work until ctx ends, sending token with every write to a fenced resource.
				<-ctx.Done()
			},
			OnStoppedLeading: func() { fmt.Println("leadership over") },
		},
	})
}
