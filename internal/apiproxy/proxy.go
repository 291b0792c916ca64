package apiproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// Mode is what the proxy does with traffic.
type Mode int32

const (
	// Pass forwards requests and delivers responses and watch frames as they come.
	Pass Mode = iota
	// Hold keeps new requests at the proxy without forwarding them, and delivers no response
	// and no watch frame, until the mode changes.
	Hold
	// Refuse fails every request and cuts every open watch stream at once.
	Refuse
)

// String names the mode.
func (m Mode) String() string {
	switch m {
	case Pass:
		return "Pass"
	case Hold:
		return "Hold"
	case Refuse:
		return "Refuse"
	}
	return fmt.Sprintf("Mode(%d)", int32(m))
}

// Options adjust a Proxy. The zero value is ready to use.
type Options struct {
	// OnForward, when set, is called with each request just before it is sent upstream (after
	// any Hold), from the request's own goroutine; it must not block and must not modify the
	// request. Requests held and then given up, or refused, never reach it.
	OnForward func(*http.Request)
}

// errRefused fails the requests and streams of a proxy in mode Refuse, or closed.
var errRefused = errors.New("apiproxy: refused")

// Proxy is a running TLS-terminating reverse proxy to one API server. Its methods are safe for
// concurrent use.
type Proxy struct {
	opts      Options
	url       string
	caPEM     []byte
	upstream  *rest.Config
	transport http.RoundTripper
	rp        *httputil.ReverseProxy
	srv       *http.Server
	served    chan struct{} // closed when srv.Serve returns

	mu      sync.Mutex
	mode    Mode
	changed chan struct{} // closed and replaced at every mode change, and at Close
	closed  bool
	streams map[*stream]struct{}
	frames  []Frame
	active  sync.WaitGroup // handlers and stream pumps; Add only under mu while !closed
}

// Start serves a proxy to the API server of upstream on a free port of 127.0.0.1, in mode
// Pass. Close it when done.
func Start(upstream *rest.Config, opts Options) (*Proxy, error) {
	target, _, err := rest.DefaultServerUrlFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("apiproxy: upstream address: %w", err)
	}
	transport, err := rest.TransportFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("apiproxy: upstream transport: %w", err)
	}
	cert, caPEM, err := selfSigned()
	if err != nil {
		return nil, fmt.Errorf("apiproxy: serving certificate: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("apiproxy: listen: %w", err)
	}
	discard := log.New(io.Discard, "", 0)
	p := &Proxy{
		opts:      opts,
		url:       "https://" + ln.Addr().String(),
		caPEM:     caPEM,
		upstream:  rest.CopyConfig(upstream),
		transport: transport,
		served:    make(chan struct{}),
		changed:   make(chan struct{}),
		streams:   make(map[*stream]struct{}),
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			if isWatch(r.In) {
				// A client's Accept-Encoding would reach the API server, which then gzips the
				// stream: frames could no longer be told apart, held or replayed.
				r.Out.Header.Set("Accept-Encoding", "identity")
			}
		},
		Transport: transport,
		// Watch responses have no length: deliver every frame as soon as it is read.
		FlushInterval:  -1,
		ModifyResponse: p.modifyResponse,
		ErrorHandler:   p.errorHandler,
		ErrorLog:       discard,
	}
	p.srv = &http.Server{
		Handler:   p,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ErrorLog:  discard,
	}
	go func() {
		defer close(p.served)
		_ = p.srv.ServeTLS(ln, "", "") // returns http.ErrServerClosed after Close
	}()
	return p, nil
}

// Config returns a new client configuration that reaches the API server through the proxy. It
// trusts only the proxy's certificate and carries no credentials (the proxy adds the
// upstream's); QPS, Burst, Timeout and UserAgent are copied from the upstream configuration.
func (p *Proxy) Config() *rest.Config {
	return &rest.Config{
		Host:            p.url,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), p.caPEM...)},
		QPS:             p.upstream.QPS,
		Burst:           p.upstream.Burst,
		Timeout:         p.upstream.Timeout,
		UserAgent:       p.upstream.UserAgent,
	}
}

// SetMode switches the proxy to m. It takes effect at once for held requests and open streams.
func (p *Proxy) SetMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.mode == m {
		return
	}
	p.mode = m
	close(p.changed)
	p.changed = make(chan struct{})
}

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Close stops serving, fails every request and stream still open, and returns once every
// goroutine the proxy started has ended. Idle upstream connections are closed.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.changed) // wakes held requests and streams; they see closed and fail
	p.mu.Unlock()

	err := p.srv.Close()
	<-p.served
	p.active.Wait()
	utilnet.CloseIdleConnectionsFor(p.transport)
	if err != nil {
		return fmt.Errorf("apiproxy: close: %w", err)
	}
	return nil
}

// enter registers a goroutine with Close; false means the proxy is closed.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.active.Add(1)
	return true
}

// gate waits while the proxy holds and returns the mode that let it through (Pass or Refuse;
// Refuse also once closed) with a channel closed at the next change, or ctx's error when the
// caller gave up first.
func (p *Proxy) gate(ctx context.Context) (Mode, <-chan struct{}, error) {
	for {
		p.mu.Lock()
		mode, changed, closed := p.mode, p.changed, p.closed
		p.mu.Unlock()
		if closed {
			return Refuse, changed, nil
		}
		if mode != Hold {
			return mode, changed, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return Hold, changed, ctx.Err()
		}
	}
}

// ServeHTTP holds, refuses or forwards one request.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.enter() {
		panic(http.ErrAbortHandler)
	}
	defer p.active.Done()
	mode, _, err := p.gate(r.Context())
	if err != nil {
		return // the client gave up while held; nobody reads an answer
	}
	if mode == Refuse {
		panic(http.ErrAbortHandler) // resets the HTTP/2 stream or closes the HTTP/1 connection
	}
	if p.opts.OnForward != nil {
		p.opts.OnForward(r)
	}
	p.rp.ServeHTTP(w, r)
}

// modifyResponse holds a response that arrives while the proxy holds, and wraps JSON watch
// streams so their frames can be held, captured and replayed.
func (p *Proxy) modifyResponse(resp *http.Response) error {
	ctx := resp.Request.Context()
	mode, _, err := p.gate(ctx)
	if err != nil {
		return err
	}
	if mode == Refuse {
		return errRefused
	}
	if resp.StatusCode == http.StatusOK && isWatch(resp.Request) && isJSON(resp.Header.Get("Content-Type")) {
		s, ok := p.newStream(ctx, resp.Request.URL, resp.Body)
		if !ok {
			return errRefused
		}
		resp.Body = s
	}
	return nil
}

// errorHandler answers a request whose upstream round trip or response hold failed.
func (p *Proxy) errorHandler(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errRefused) {
		panic(http.ErrAbortHandler)
	}
	if r.Context().Err() != nil {
		return // the client is gone
	}
	http.Error(w, "apiproxy: upstream: "+err.Error(), http.StatusBadGateway)
}
