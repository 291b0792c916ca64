package etcdtest

import (
	"context"
	"strings"
	"sync"

	"google.golang.org/grpc"
)

// Gate counts and stalls the etcd gRPC calls of the clients it is installed
// in (through DialOptions), by method name: "Txn", "Range", "Put",
// "LeaseKeepAlive", "Watch", ... A stalled unary call waits before it is
// sent until the gate opens or its context ends; a stalled stream holds each
// message it receives until the gate opens. It fakes faults that a byte-level
// proxy cannot aim: a stalled watch while keepalives pass, for example.
type Gate struct {
	mu      sync.Mutex
	counts  map[string]int
	stalled map[string]chan struct{} // closed when the method is unstalled
}

// NewGate returns an open gate.
func NewGate() *Gate {
	return &Gate{counts: make(map[string]int), stalled: make(map[string]chan struct{})}
}

// DialOptions returns the interceptors to pass in clientv3.Config.DialOptions.
func (g *Gate) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(g.unary),
		grpc.WithChainStreamInterceptor(g.stream),
	}
}

// Count returns how many calls (or streams) of method were started.
func (g *Gate) Count(method string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.counts[method]
}

// Stall makes calls of the methods wait until Unstall.
func (g *Gate) Stall(methods ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range methods {
		if _, ok := g.stalled[m]; !ok {
			g.stalled[m] = make(chan struct{})
		}
	}
}

// Unstall lets waiting and future calls of the methods through.
func (g *Gate) Unstall(methods ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range methods {
		if c, ok := g.stalled[m]; ok {
			close(c)
			delete(g.stalled, m)
		}
	}
}

// wait blocks while method is stalled; it returns ctx's error if ctx ends
// first.
func (g *Gate) wait(ctx context.Context, method string) error {
	for {
		g.mu.Lock()
		c, ok := g.stalled[method]
		g.mu.Unlock()
		if !ok {
			return nil
		}
		select {
		case <-c:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func shortName(fullMethod string) string {
	return fullMethod[strings.LastIndex(fullMethod, "/")+1:]
}

func (g *Gate) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	name := shortName(method)
	g.mu.Lock()
	g.counts[name]++
	g.mu.Unlock()
	if err := g.wait(ctx, name); err != nil {
		return err
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (g *Gate) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	name := shortName(method)
	g.mu.Lock()
	g.counts[name]++
	g.mu.Unlock()
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &gatedStream{ClientStream: cs, g: g, name: name}, nil
}

// gatedStream holds each received message while its method is stalled.
type gatedStream struct {
	grpc.ClientStream
	g    *Gate
	name string
}

func (s *gatedStream) RecvMsg(m any) error {
	if err := s.ClientStream.RecvMsg(m); err != nil {
		return err
	}
	return s.g.wait(s.Context(), s.name)
}
