// Command kubectl-dlock is the kubectl plugin for lockwarden's DistributedLocks. On PATH it
// runs as `kubectl dlock`: get, history, why, release and unfinalize. It reads and writes
// only through the API server, with kubectl's flags (--kubeconfig, --context, -n,
// --all-namespaces); it never talks to etcd.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// Exit codes, also listed in every verb's --help.
const (
	exitOK      = 0 // done
	exitError   = 1 // the cluster said no or could not be asked: unknown lock, no CRD, no permission
	exitUsage   = 2 // a bad flag or argument; nothing was sent
	exitRefused = 3 // the request is understood but the lock's state (or a missing confirmation) forbids it; nothing was changed
)

const exitCodesHelp = `Exit codes:
  0  done
  1  the cluster said no or could not be asked (unknown lock, CRD not installed, no permission)
  2  a bad flag or argument; nothing was sent
  3  refused: the lock's state, or a missing confirmation flag, forbids it; nothing was changed`

var (
	// ErrRefused marks a request the plugin will not carry out in the lock's current state
	// (exit code 3).
	ErrRefused = errors.New("refused")
)

// usageError is a bad flag or argument (exit code 2); its message is the cause alone.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// usagef returns a usageError.
func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns its exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := newRootCommand(stdout, stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "error:", err)
	return exitCode(err)
}

// exitCode maps an error to the documented exit code.
func exitCode(err error) int {
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, new(*usageError)):
		return exitUsage
	case errors.Is(err, ErrRefused):
		return exitRefused
	}
	return exitError
}

// options are the flags every verb shares.
type options struct {
	config        *genericclioptions.ConfigFlags
	allNamespaces bool
	out, errOut   io.Writer
}

func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	o := &options{config: genericclioptions.NewConfigFlags(true), out: stdout, errOut: stderr}
	root := &cobra.Command{
		Use: "kubectl-dlock",
		// Shown as "kubectl dlock" in usage lines, the name kubectl runs the plugin by.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl dlock"},
		Short:       "Inspect and operate lockwarden DistributedLocks",
		Long: `kubectl dlock shows who holds each DistributedLock, why a pod is or is not the next
holder, and ends a term on an operator's request. It uses kubectl's connection flags.

` + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          cobra.ArbitraryArgs,
		// A bare `kubectl dlock` prints the help and exits 0; an unknown verb is a usage error.
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return c.Help()
			}
			return usagef("unknown verb %q (verbs: get, history, why, release, unfinalize)", args[0])
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usagef("%v (see %s --help)", err, c.CommandPath())
	})
	o.config.AddFlags(root.PersistentFlags())
	root.AddCommand(newGetCommand(o), newHistoryCommand(o), newWhyCommand(o), newReleaseCommand(o), newUnfinalizeCommand(o))
	for _, c := range root.Commands() {
		c.Long += "\n\n" + exitCodesHelp
	}
	return root
}

// exactArgs is cobra.ExactArgs with the usage sentinel.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %s, got %d arguments (see %s --help)", c.Name(), what, len(args), c.CommandPath())
		}
		return nil
	}
}
