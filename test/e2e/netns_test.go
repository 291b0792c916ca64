//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// netns opens sockets inside another network namespace. A socket belongs to the namespace
// of the thread that created it, and keeps it afterwards, so each dial or listen runs on a
// fresh goroutine locked to its OS thread, switched into the namespace; the goroutine exits
// still locked, which makes the runtime discard that thread instead of reusing it.
type netns struct {
	path string // /proc/<pid>/ns/net
}

// do runs fn on a thread inside the namespace.
func (n netns) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		f, err := os.Open(n.path)
		if err != nil {
			errc <- fmt.Errorf("open network namespace: %w", err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter network namespace %s: %w", n.path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// DialContext dials address from inside the namespace.
func (n netns) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := n.do(func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, network, address)
		return err
	})
	return c, err
}

// Listen listens on address inside the namespace.
func (n netns) Listen(network, address string) (net.Listener, error) {
	var l net.Listener
	err := n.do(func() error {
		var err error
		l, err = net.Listen(network, address)
		return err
	})
	return l, err
}
