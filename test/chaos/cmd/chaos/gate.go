package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// gate is a manager's path to the API server (plain HTTP on loopback; it adds the upstream's
// credentials). Armed, it holds the manager's DistributedLock status writes that match: they
// reach the API server only at release, in order, whether or not the client still waits. A
// write an API server applies late, after its client was deposed, is what it stands for
// (issue 10, item 3).
type gate struct {
	url    string
	target *url.URL // the API server
	srv    *http.Server
	rp     *httputil.ReverseProxy
	client *http.Client
	served chan struct{}

	mu    sync.Mutex
	match func(status map[string]any) bool // nil: disarmed
	held  []*heldWrite
	added chan struct{} // closed and replaced whenever a write is held
}

// heldWrite is one status write kept by the gate.
type heldWrite struct {
	method, path string
	header       http.Header
	body         []byte
	status       map[string]any
	done         chan *http.Response // the upstream's answer, once released
}

func startGate(upstream *rest.Config) (*gate, error) {
	target, _, err := rest.DefaultServerUrlFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("gate: upstream address: %w", err)
	}
	transport, err := rest.TransportFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("gate: upstream transport: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("gate: listen: %w", err)
	}
	g := &gate{url: "http://" + ln.Addr().String(), target: target, client: &http.Client{Transport: transport, Timeout: 10 * time.Second},
		served: make(chan struct{}), added: make(chan struct{})}
	g.rp = &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(target) },
		Transport:     transport,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0), // a manager killed mid-request is the point
	}
	g.srv = &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(g.served)
		_ = g.srv.Serve(ln) // http.ErrServerClosed after close
	}()
	return g, nil
}

// isLockStatusWrite reports whether r writes a DistributedLock's status.
func isLockStatusWrite(r *http.Request) bool {
	return (r.Method == http.MethodPut || r.Method == http.MethodPatch) &&
		strings.Contains(r.URL.Path, "/distributedlocks/") && strings.HasSuffix(r.URL.Path, "/status")
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	match := g.match
	g.mu.Unlock()
	if match == nil || !isLockStatusWrite(r) {
		g.rp.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var obj struct {
		Status map[string]any `json:"status"`
	}
	_ = json.Unmarshal(body, &obj) // a patch without status matches as an empty one
	g.mu.Lock()
	if g.match == nil || !g.match(obj.Status) {
		g.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		g.rp.ServeHTTP(w, r)
		return
	}
	h := &heldWrite{method: r.Method, path: r.URL.RequestURI(), header: r.Header.Clone(), body: body, status: obj.Status, done: make(chan *http.Response, 1)}
	g.held = append(g.held, h)
	close(g.added)
	g.added = make(chan struct{})
	g.mu.Unlock()
	select {
	case resp := <-h.done:
		if resp == nil {
			http.Error(w, "gate: upstream failed", http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, vs := range resp.Header {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	case <-r.Context().Done(): // the client is gone (deposed, killed); the write stays held
	}
}

// arm holds the lock status writes whose status match accepts from now on.
func (g *gate) arm(match func(status map[string]any) bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.match = match
}

// disarm lets new writes pass; the ones held stay held until release.
func (g *gate) disarm() { g.arm(nil) }

// waitHeld waits until at least n writes are held, and reports whether they are.
func (g *gate) waitHeld(ctx context.Context, n int, limit time.Duration) bool {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		g.mu.Lock()
		got, added := len(g.held), g.added
		g.mu.Unlock()
		if got >= n {
			return true
		}
		select {
		case <-added:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// release sends every held write upstream, in order, and returns their HTTP status codes.
func (g *gate) release(ctx context.Context) []int {
	g.mu.Lock()
	held := g.held
	g.held = nil
	g.mu.Unlock()
	var codes []int
	for _, h := range held {
		resp, err := g.send(ctx, h)
		if err != nil {
			codes = append(codes, 0)
			h.done <- nil
			continue
		}
		codes = append(codes, resp.StatusCode)
		// The client may be gone; the answer is buffered for one that still waits.
		b, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(b))
		h.done <- resp
	}
	return codes
}

func (g *gate) send(ctx context.Context, h *heldWrite) (*http.Response, error) {
	u := *g.target
	u.Path, u.RawQuery = "", ""
	req, err := http.NewRequestWithContext(ctx, h.method, strings.TrimSuffix(u.String(), "/")+h.path, bytes.NewReader(h.body))
	if err != nil {
		return nil, err
	}
	req.Header = h.header.Clone()
	return g.client.Do(req)
}

// close stops serving and answers every write still held with an error.
func (g *gate) close() {
	g.mu.Lock()
	held := g.held
	g.held, g.match = nil, nil
	g.mu.Unlock()
	for _, h := range held {
		h.done <- nil
	}
	_ = g.srv.Close() // watches never go idle: no graceful shutdown
	<-g.served
}

// writeKubeconfig writes a kubeconfig that reaches the API server through the gate.
func (g *gate) writeKubeconfig(path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["chaos"] = &clientcmdapi.Cluster{Server: g.url}
	kc.AuthInfos["chaos"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["chaos"] = &clientcmdapi.Context{Cluster: "chaos", AuthInfo: "chaos"}
	kc.CurrentContext = "chaos"
	return clientcmd.WriteToFile(*kc, path)
}
