// Command playground runs lockwarden on one machine: a local control plane from real
// binaries (kube-apiserver and etcd built into ./bin), the lockwarden manager against its own
// etcd, the sample locks, a fenced ledger and three fenced workers playing the candidate pods
// of the payments-leader lock, and five more playing the candidates of ingest-shards, a lock
// of three slots, each writing to its slot's shard of a sharded ledger. No kubelet runs here:
// the playground sets the pods' status from its worker processes, as a kubelet would. It shows
// a failover live, with the ledger refusing the old leader's token, then two slots moving to
// the waiting pods, with the slot's shard refusing its ex-holder's token. `make run` starts
// it; Ctrl-C stops everything it started and removes its files. `make run
// ARGS=--demo-and-exit` runs to the end of the slot demo and exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/lockwarden/lockwarden/internal/testenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "playground:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("playground", flag.ContinueOnError)
	fs.SetOutput(out)
	demoAndExit := fs.Bool("demo-and-exit", false, "run to one failover and the slot demo, print their summaries and exit 0")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil // -h, --help: the usage is printed; exit 0
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags: --demo-and-exit)", fs.Arg(0))
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	for _, bin := range []string{"lockwarden", "fenced-worker", "lockwarden-agent", "kubectl-dlock", "kubectl", "etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(root, "bin", bin)); err != nil {
			return fmt.Errorf("bin/%s not found: run `make run` (it builds everything the playground needs)", bin)
		}
	}
	dir := filepath.Join(root, ".playground")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}

	// The live view and the demo's narration both write to out.
	p := &playground{root: root, dir: dir, out: &syncWriter{w: out}}
	err = p.run(ctx, *demoAndExit)
	p.close()
	if rmErr := os.RemoveAll(dir); rmErr != nil {
		return errors.Join(err, rmErr)
	}
	// Said last, once nothing the playground started runs any more.
	p.say("playground stopped: every process it started has exited, and ./.playground is removed")
	return err
}

// run starts everything, runs the demo and, unless demoAndExit, prints the hint and waits for
// ctx to end; the caller stops what was started.
func (p *playground) run(ctx context.Context, demoAndExit bool) error {
	if err := p.start(ctx); err != nil {
		return err
	}
	if err := p.demo(ctx); err != nil {
		return err
	}
	if demoAndExit {
		return nil
	}
	p.hint(ctx)
	<-ctx.Done()
	p.say("\nstopping: workers, ledger, manager, etcd, control plane ...")
	return nil
}

// syncWriter serializes writes from the playground's goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}
