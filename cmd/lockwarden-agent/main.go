// Command lockwarden-agent gives leadership of a DistributedLock to programs that are not
// written in Go, or not written for lockwarden, in one of two modes:
//
//	lockwarden-agent exec --lock NAME [flags] -- cmd args...
//	lockwarden-agent sidecar --lock NAME [flags]
//
// exec runs cmd only while this pod leads, with the fencing token in $LOCKWARDEN_TOKEN; it
// signals the child's process group with SIGTERM at the term's end or at ValidUntil - grace,
// whichever comes first, and with SIGKILL grace later (never after ValidUntil). sidecar
// serves GET /leader, GET /watch (server-sent events), /readyz and /healthz, and keeps the
// current token in a file of a shared volume. Both follow the lock with pkg/leadership; the
// pod's identity is $POD_UID (downward API metadata.uid). docs/agent.md has the details.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes of the agent itself. In exec mode, a child that exits by itself during a term
// makes the agent exit with the child's code (128+n for a child killed by signal n).
const (
	exitOK          = 0   // stopped by SIGTERM or SIGINT after stopping its child; or --help
	exitAgent       = 125 // bad flags or arguments, or the agent failed (kubeconfig, API, files)
	exitNotExec     = 126 // exec: cmd was found but is not executable
	exitNotFound    = 127 // exec: cmd was not found
	exitSignalShift = 128 // exec: a child killed by signal n (not by the agent) gives 128+n
)

// errUsage marks an error in the command line: the message is followed by a hint to --help.
var errUsage = errors.New("usage")

func main() {
	if os.Getenv(guardEnv) != "" { // this process is a child's guard (guard_linux.go)
		os.Exit(runGuard(os.Args[1:], os.Environ()))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program: it parses args, runs the mode until ctx ends (or, in exec mode,
// the child exits by itself) and returns the exit code. environ is the process environment
// (POD_UID, POD_NAME, POD_NAMESPACE, ...) and what the child inherits.
func run(ctx context.Context, args, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitAgent
	}
	var code int
	var err error
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	case "exec":
		var o execOptions
		if o, err = parseExec(args[1:], environ, stdout); err == nil {
			code, err = runExec(ctx, o, environ, stdout, stderr)
		}
	case "sidecar":
		var o sidecarOptions
		if o, err = parseSidecar(args[1:], environ, stdout); err == nil {
			err = runSidecar(ctx, o, stderr)
		}
	default:
		err = fmt.Errorf("%w: unknown mode %q: want exec or sidecar", errUsage, args[0])
	}
	switch {
	case errors.Is(err, errHelp):
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "lockwarden-agent: %v\n", err)
		if errors.Is(err, errUsage) {
			fmt.Fprintln(stderr, "run `lockwarden-agent --help` for the flags")
		}
		return exitCodeOf(err)
	}
	return code
}

// exitCodeOf is the exit code for an error of the agent itself.
func exitCodeOf(err error) int {
	switch {
	case errors.Is(err, errCmdNotFound):
		return exitNotFound
	case errors.Is(err, errCmdNotExecutable):
		return exitNotExec
	}
	return exitAgent
}
