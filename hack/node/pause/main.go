// Command pause is the node's sandbox ("infra") container: it holds a pod's namespaces,
// blocks until SIGINT or SIGTERM and reaps the children it inherits. `make image` puts it
// into localhost/lockwarden/pause:1, the sandbox_image of hack/node's containerd config.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 8)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range ch {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		reap()
	}
}

// reap collects every exited child without blocking.
func reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
