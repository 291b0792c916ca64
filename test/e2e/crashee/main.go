// Command crashee is the container of the restart evidence (test/e2e, TestRestartEvidence): a
// main process that leaves behind every kind of process a restart must not let outlive it,
// and dies in the way the test asks. `make image` puts it into localhost/crashee:dev.
//
// Modes (the first argument; every process names its role there, so the test tells them
// apart in /proc/<pid>/cmdline):
//
//	main           serve GET /healthz on :8080 (the liveness probe); start a forked daemon
//	               and a stopped child; then, on the signals the test sends from the host:
//	               SIGUSR1  crash: panic (the process exits by itself, exit code 2);
//	               SIGUSR2  allocate memory until the cgroup's limit OOM-kills it;
//	               SIGHUP   fail the liveness probe from now on (the kubelet kills it);
//	               SIGTERM  exit 143, as a program that stops on SIGTERM does.
//	daemon-parent  setsid(), start the daemon, exit at once (the classic double fork).
//	daemon         the forked daemon: orphaned, in its own session, stdio on /dev/null.
//	stopped        stop itself with SIGSTOP; the test sees it in state T.
//	exec, sleep    block until SIGTERM (exit 0): the process the test starts with
//	               `kubectl exec`, and the other containers' process.
package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	mode := "main"
	if len(os.Args) > 1 {
		mode = os.Args[1]
	}
	var err error
	switch mode {
	case "main":
		err = runMain()
	case "daemon-parent":
		err = daemonParent()
	case "daemon", "exec", "sleep":
		block(mode)
	case "stopped":
		if err = syscall.Kill(os.Getpid(), syscall.SIGSTOP); err == nil {
			block(mode)
		}
	default:
		err = fmt.Errorf("unknown mode %q (main, daemon-parent, daemon, stopped, exec, sleep)", mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "crashee:", err)
		os.Exit(1)
	}
}

// runMain is the container's main process.
func runMain() error {
	var unhealthy atomic.Bool
	http.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if unhealthy.Load() {
			http.Error(w, "failing on purpose (SIGHUP)", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	srv := &http.Server{Addr: ":8080", ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()

	// Notify before the children start: the test sends a signal only after it saw them.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGHUP, syscall.SIGTERM)

	parent, err := start("daemon-parent")
	if err != nil {
		return err
	}
	if err := parent.Wait(); err != nil {
		return fmt.Errorf("daemon-parent: %w", err)
	}
	stopped, err := start("stopped")
	if err != nil {
		return err
	}
	go func() { _ = stopped.Wait() }() // reaps it if it ever exits; Wait ignores stops
	fmt.Printf("crashee main pid %d: daemon forked, stopped child pid %d\n", os.Getpid(), stopped.Process.Pid)

	for {
		select {
		case err := <-served:
			return fmt.Errorf("serve :8080: %w", err)
		case s := <-sigs:
			fmt.Printf("crashee main: %v\n", s)
			switch s {
			case syscall.SIGUSR1:
				panic("crash on trigger (SIGUSR1)")
			case syscall.SIGUSR2:
				allocate()
			case syscall.SIGHUP:
				unhealthy.Store(true)
			case syscall.SIGTERM:
				os.Exit(143)
			}
		}
	}
}

// sink keeps every allocated chunk reachable, so the garbage collector frees none.
var sink [][]byte

// allocate touches memory in 4 MiB chunks until the kernel kills the process.
func allocate() {
	for i := 1; ; i++ {
		b := make([]byte, 4<<20)
		for j := 0; j < len(b); j += 4096 {
			b[j] = 1
		}
		sink = append(sink, b)
		if i%8 == 0 {
			fmt.Printf("crashee main: %d MiB allocated\n", 4*i)
		}
	}
}

// daemonParent detaches into a new session, starts the daemon and exits without waiting:
// the daemon is orphaned and adopted by the nearest reaper (the PID namespace's init, or a
// subreaper such as the runtime's shim when there is no namespace of its own).
func daemonParent() error {
	if _, err := syscall.Setsid(); err != nil {
		return fmt.Errorf("setsid: %w", err)
	}
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	cmd := exec.Command(self(), "daemon")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, devnull, devnull
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the daemon: %w", err)
	}
	return nil
}

// start runs this binary in another mode as a child, on the same stdout and stderr.
func start(mode string) (*exec.Cmd, error) {
	cmd := exec.Command(self(), mode)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", mode, err)
	}
	return cmd, nil
}

func self() string {
	if p, err := os.Executable(); err == nil {
		return p
	}
	return os.Args[0]
}

// block waits for SIGTERM or SIGINT and exits 0. The handler matters for a PID namespace's
// init: the kernel delivers it only the signals it handles.
func block(mode string) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	fmt.Printf("crashee %s pid %d\n", mode, os.Getpid())
	<-sigs
	os.Exit(0)
}
