package main

import (
	"context"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
)

// rpcCounter counts the etcd requests the contenders' clients send: unary
// calls by method, and watches created on watch streams. It explains a
// cycle's cost in round trips and raft writes.
type rpcCounter struct {
	txn, rng, del, watches, streams atomic.Int64
}

func newRPCCounter() *rpcCounter { return &rpcCounter{} }

func (c *rpcCounter) dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithChainUnaryInterceptor(c.unary),
		grpc.WithChainStreamInterceptor(c.stream),
	}
}

func (c *rpcCounter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	switch method[strings.LastIndex(method, "/")+1:] {
	case "Txn":
		c.txn.Add(1)
	case "Range":
		c.rng.Add(1)
	case "DeleteRange":
		c.del.Add(1)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *rpcCounter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(method, "/Watch") {
		// clientv3 closes a client's watch stream when its last watch ends
		// and opens a new one for the next.
		c.streams.Add(1)
	}
	return &countingStream{ClientStream: cs, c: c}, nil
}

// countingStream counts watch create requests sent on a stream.
type countingStream struct {
	grpc.ClientStream
	c *rpcCounter
}

func (s *countingStream) SendMsg(m any) error {
	if wr, ok := m.(*etcdserverpb.WatchRequest); ok && wr.GetCreateRequest() != nil {
		s.c.watches.Add(1)
	}
	return s.ClientStream.SendMsg(m)
}

// counts are the cumulative numbers a run's cost is computed from.
type counts struct {
	cpu          time.Duration // user + system CPU of this process (client and etcd)
	txn, rng     int64         // Txn and Range calls
	del          int64         // DeleteRange calls
	watches      int64         // watches created
	streams      int64         // watch streams opened
	fsyncs       uint64        // etcd WAL fsyncs
	fsyncSeconds float64       // their total duration
	proposals    float64       // raft proposals committed
}

func (c counts) sub(o counts) counts {
	return counts{
		cpu: c.cpu - o.cpu, txn: c.txn - o.txn, rng: c.rng - o.rng, del: c.del - o.del,
		watches: c.watches - o.watches, streams: c.streams - o.streams, fsyncs: c.fsyncs - o.fsyncs,
		fsyncSeconds: c.fsyncSeconds - o.fsyncSeconds, proposals: c.proposals - o.proposals,
	}
}

func (c counts) add(o counts) counts {
	return counts{
		cpu: c.cpu + o.cpu, txn: c.txn + o.txn, rng: c.rng + o.rng, del: c.del + o.del,
		watches: c.watches + o.watches, streams: c.streams + o.streams, fsyncs: c.fsyncs + o.fsyncs,
		fsyncSeconds: c.fsyncSeconds + o.fsyncSeconds, proposals: c.proposals + o.proposals,
	}
}

// counters is one reading of the counts.
type counters struct {
	at time.Time
	counts
}

// usage is what a run (or the sum of its rounds) cost.
type usage struct {
	wall time.Duration
	counts
}

func (u usage) add(o usage) usage {
	return usage{wall: u.wall + o.wall, counts: u.counts.add(o.counts)}
}

func (c counters) sub(o counters) usage {
	return usage{wall: c.at.Sub(o.at), counts: c.counts.sub(o.counts)}
}

func (b *bench) snapshot() counters {
	c := counters{at: time.Now(), counts: counts{
		cpu: processCPU(),
		txn: b.rpcs.txn.Load(), rng: b.rpcs.rng.Load(), del: b.rpcs.del.Load(),
		watches: b.rpcs.watches.Load(), streams: b.rpcs.streams.Load(),
	}}
	// The embedded etcd registers its metrics in the default registry.
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return c // the etcd columns then read 0; the measurements stand
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "etcd_disk_wal_fsync_duration_seconds":
			for _, m := range mf.GetMetric() {
				c.fsyncs += m.GetHistogram().GetSampleCount()
				c.fsyncSeconds += m.GetHistogram().GetSampleSum()
			}
		case "etcd_server_proposals_committed_total":
			for _, m := range mf.GetMetric() {
				c.proposals += m.GetGauge().GetValue()
			}
		}
	}
	return c
}

// processCPU returns the user + system CPU time used by this process.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
