// Command playground runs lockwarden on one machine: a local control plane from real binaries
// (kube-apiserver and etcd built into ./bin by `make envtest-bins`) with the DistributedLock
// CRD installed and the samples applied. `make run` starts it; Ctrl-C stops everything it
// started and removes its files.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/lockwarden/lockwarden/internal/testenv"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "playground:", err)
		os.Exit(1)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("playground", flag.ContinueOnError)
	exitAfterStart := fs.Bool("exit-after-start", false, "start the control plane, apply the samples, print how to reach it, then stop and exit 0")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (flags: -exit-after-start)", fs.Arg(0))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Fprintln(out, "starting a local control plane (kube-apiserver and etcd from ./bin) ...")
	env, err := testenv.Start()
	if err != nil {
		return err
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "playground:", err)
		}
	}()

	dir := filepath.Join(env.Root, ".playground")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := env.Kubeconfig(kubeconfig); err != nil {
		return err
	}
	kubectl, err := env.Kubectl()
	if err != nil {
		return err
	}
	apply := exec.CommandContext(ctx, kubectl, "--kubeconfig", kubeconfig, "apply", "-f", filepath.Join(env.Root, "config", "samples"))
	apply.Stdout, apply.Stderr = out, os.Stderr
	if err := apply.Run(); err != nil {
		return fmt.Errorf("apply config/samples: %w", err)
	}

	rel := func(p string) string {
		if r, err := filepath.Rel(env.Root, p); err == nil {
			return "./" + r
		}
		return p
	}
	fmt.Fprintf(out, `
control plane ready; the DistributedLock CRD is installed and config/samples applied.
The controller is not part of the playground yet, so the locks stay without a holder.

In another terminal, from %s:
  export KUBECONFIG=%s
  %s get distributedlocks
  %s explain distributedlock.spec
  %s get dlock -w

Ctrl-C stops the control plane and removes %s.
`, env.Root, rel(kubeconfig), rel(kubectl), rel(kubectl), rel(kubectl), rel(dir))

	if *exitAfterStart {
		return nil
	}
	<-ctx.Done()
	fmt.Fprintln(out, "\nstopping ...")
	return nil
}
