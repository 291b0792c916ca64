package etcdtest

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestProxySurvivesADownTarget: etcd's proxy reports each failed dial on a channel with
// room for 16; StartProxy drains it, so after many connections to a target that was down
// the proxy still forwards once the target is back (without the drain the 17th failure
// blocks the accept loop for good).
func TestProxySurvivesADownTarget(t *testing.T) {
	ports := FreePorts(t, 2)
	target := fmt.Sprintf("127.0.0.1:%d", ports[1])
	_, stop, err := StartProxy(url.URL{Scheme: "tcp", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}, url.URL{Scheme: "tcp", Host: target})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	from := fmt.Sprintf("127.0.0.1:%d", ports[0])
	for i := range 40 { // the target is down: every dial behind the proxy fails
		c, err := net.DialTimeout("tcp", from, time.Second)
		if err != nil {
			t.Fatalf("connection %d to the proxy: %v", i, err)
		}
		_ = c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		_, _ = c.Read(make([]byte, 1))
		_ = c.Close()
	}

	ln, err := net.Listen("tcp", target)
	if err != nil {
		t.Fatalf("bring the target up: %v", err)
	}
	var wg sync.WaitGroup
	defer func() { // after c.Close: the proxy then closes its side and the echoes end
		_ = ln.Close()
		wg.Wait()
	}()
	wg.Go(func() {
		for { // echo on every connection: a late one from the loop above may come first
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	c, err := net.DialTimeout("tcp", from, time.Second)
	if err != nil {
		t.Fatalf("dial the proxy: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatalf("write through the proxy: %v", err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through the proxy after 40 failed dials: %q, %v (the proxy stopped accepting)", buf, err)
	}
}
