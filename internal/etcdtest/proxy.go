package etcdtest

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/pkg/v3/proxy"
	"go.uber.org/zap"
)

// Proxy is a TCP proxy between clients and one etcd member that can delay,
// pause or blackhole traffic in either direction: Tx is client -> etcd, Rx is
// etcd -> client. Paused traffic is delivered when unpaused (late traffic);
// blackholed traffic is dropped (which breaks the gRPC stream it was part of).
type Proxy struct {
	srv      proxy.Server
	endpoint string
}

// NewProxy starts a proxy to target (a client URL) on a free loopback port,
// closed at cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	to, err := url.Parse(target)
	if err != nil {
		t.Fatalf("proxy target %q: %v", target, err)
	}
	port := FreePorts(t, 1)[0]
	from := url.URL{Scheme: "tcp", Host: fmt.Sprintf("127.0.0.1:%d", port)}
	to.Scheme = "tcp"
	srv, stop, err := StartProxy(from, *to)
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{srv: srv, endpoint: "http://" + from.Host}
	t.Cleanup(func() {
		p.srv.UnpauseTx()
		p.srv.UnpauseRx()
		stop()
	})
	return p
}

// StartProxy starts etcd's TCP proxy from -> to, waits until it listens, and drains its
// error channel for as long as it runs. The drain is not optional: the proxy reports every
// failed dial and broken copy on a channel with room for 16 and then blocks, in its accept
// loop and in the copying goroutines, until someone reads. A proxy in front of a member that
// was down for a while (a kill, a restore) stops accepting connections without the drain,
// and the member looks cut off for good (the "no leader" and unconfirmed lease renewals seen
// after restores in the fault-injection runs). stop closes the proxy and waits for the drain.
func StartProxy(from, to url.URL) (srv proxy.Server, stop func(), err error) {
	srv = proxy.NewServer(proxy.ServerConfig{
		Logger: zap.NewNop(), // nil panics in the proxy's goroutines
		From:   from,
		To:     to,
	})
	select {
	case <-srv.Ready():
	case err := <-srv.Error():
		_ = srv.Close()
		return nil, nil, fmt.Errorf("proxy to %s: %w", to.Host, err)
	case <-time.After(5 * time.Second):
		_ = srv.Close()
		return nil, nil, fmt.Errorf("proxy to %s: not ready", to.Host)
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for {
			select {
			case err := <-srv.Error():
				_ = err // a dial or copy failure; the faults under test cause them
			case <-srv.Done():
				return
			}
		}
	}()
	return srv, func() { _ = srv.Close(); <-drained }, nil
}

// Endpoint returns the proxy's client URL.
func (p *Proxy) Endpoint() string { return p.endpoint }

// Host returns the proxy's host:port.
func (p *Proxy) Host() string { return strings.TrimPrefix(p.endpoint, "http://") }

// PauseTx holds client -> etcd traffic until UnpauseTx.
func (p *Proxy) PauseTx() { p.srv.PauseTx() }

// UnpauseTx delivers held client -> etcd traffic and resumes forwarding.
func (p *Proxy) UnpauseTx() { p.srv.UnpauseTx() }

// PauseRx holds etcd -> client traffic until UnpauseRx.
func (p *Proxy) PauseRx() { p.srv.PauseRx() }

// UnpauseRx delivers held etcd -> client traffic and resumes forwarding.
func (p *Proxy) UnpauseRx() { p.srv.UnpauseRx() }

// Pause holds traffic both ways.
func (p *Proxy) Pause() { p.srv.PauseTx(); p.srv.PauseRx() }

// Unpause releases traffic both ways.
func (p *Proxy) Unpause() { p.srv.UnpauseTx(); p.srv.UnpauseRx() }

// DelayTx delays every client -> etcd read by d (reads are forwarded one
// after another, so a burst is delayed more); UndelayTx removes it.
func (p *Proxy) DelayTx(d time.Duration) { p.srv.DelayTx(d, 0) }

// UndelayTx removes the client -> etcd delay.
func (p *Proxy) UndelayTx() { p.srv.UndelayTx() }

// DelayRx delays every etcd -> client read by d.
func (p *Proxy) DelayRx(d time.Duration) { p.srv.DelayRx(d, 0) }

// UndelayRx removes the etcd -> client delay.
func (p *Proxy) UndelayRx() { p.srv.UndelayRx() }

// BlackholeTx drops client -> etcd traffic until UnblackholeTx.
func (p *Proxy) BlackholeTx() { p.srv.BlackholeTx() }

// UnblackholeTx stops dropping client -> etcd traffic.
func (p *Proxy) UnblackholeTx() { p.srv.UnblackholeTx() }

// BlackholeRx drops etcd -> client traffic until UnblackholeRx.
func (p *Proxy) BlackholeRx() { p.srv.BlackholeRx() }

// UnblackholeRx stops dropping etcd -> client traffic.
func (p *Proxy) UnblackholeRx() { p.srv.UnblackholeRx() }

// Server returns the underlying etcd proxy for faults not wrapped here.
func (p *Proxy) Server() proxy.Server { return p.srv }
