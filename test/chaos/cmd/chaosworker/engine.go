package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lockwarden/lockwarden/pkg/lease"
)

// runEngine is the worker as a direct user of pkg/lease: a session of ttl on the etcd
// endpoints in ETCD_ENDPOINTS (its own proxies), Acquire of the lock under ETCD_PREFIX, the
// ledger loop while the Lock is valid, Release when done; a new session when one ends. Its
// /readyz always answers 200: no kubelet judges it.
func (w *worker) runEngine(ctx context.Context, probe, lock string, ttl time.Duration) error {
	eps, prefix := os.Getenv("ETCD_ENDPOINTS"), os.Getenv("ETCD_PREFIX")
	if eps == "" || prefix == "" {
		return errors.New("ETCD_ENDPOINTS and ETCD_PREFIX must be set with --engine")
	}
	lose := &loseReply{outage: time.Second}
	stop := lose.listen()
	defer stop()
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(eps, ","), DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(lose.intercept)}})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(http.StatusOK) })
	w.stall.register(mux)
	srv := &http.Server{Addr: probe, Handler: mux, ReadHeaderTimeout: time.Second}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.ListenAndServe() // ErrServerClosed after Close below
	}()
	defer func() {
		_ = srv.Close()
		<-served
	}()
	eng := lease.NewEngine(cli, lease.WithPrefix(prefix))
	lose.path = eng.Path(lock)
	for ctx.Err() == nil {
		s, err := eng.NewSession(ctx, ttl)
		if err != nil {
			logf("new session: %v", err)
			pause(ctx, 200*time.Millisecond)
			continue
		}
		logf("session %x", int64(s.ID()))
		w.holdWith(ctx, s, lock)
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = s.Close(cctx) // best effort: an unrenewed lease expires anyway
		cancel()
	}
	return nil
}

// holdWith acquires and holds the lock on s until s ends or ctx does.
func (w *worker) holdWith(ctx context.Context, s *lease.Session, lock string) {
	for ctx.Err() == nil {
		select {
		case <-s.Done():
			return
		default:
		}
		logf("acquire")
		l, err := s.Acquire(ctx, lock, w.uid)
		if err != nil {
			logf("acquire: %v", err)
			pause(ctx, 100*time.Millisecond)
			continue
		}
		logf("acquired token %d", l.Token())
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-l.Done():
			case <-lctx.Done():
			}
			cancel()
		}()
		w.lead(lctx, l.Token(), 0, w.writer, l, nil) // one process per holder identity: nobody else presents its tokens
		cancel()
		logf("term %d ended: %v", l.Token(), l.Err())
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = l.Release(rctx) // best effort: a lost lock has nothing to release
		rcancel()
	}
}

// loseReply loses the reply of one acquire: armed by SIGUSR1 (disarmed by SIGUSR2), the next
// transaction that puts the lock's key is sent and applied, and its caller gets
// codes.Unavailable instead of the answer, as when a connection breaks after the request
// left; for the next outage every unary call fails the same way without being sent, as
// while the client reconnects.
type loseReply struct {
	path   string
	outage time.Duration
	armed  atomic.Bool
	until  atomic.Int64 // UnixNano: calls fail until then
}

func (l *loseReply) listen() (stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGUSR2)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for s := range sig {
			l.armed.Store(s == syscall.SIGUSR1)
		}
	}()
	return func() {
		signal.Stop(sig)
		close(sig)
		<-done
	}
}

func (l *loseReply) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if time.Now().UnixNano() < l.until.Load() {
		return status.Error(codes.Unavailable, "chaos: reconnecting")
	}
	err := invoker(ctx, method, req, reply, cc, opts...)
	if err != nil || method != "/etcdserverpb.KV/Txn" || !l.armed.Load() || !putsKey(req, l.path) {
		return err
	}
	if l.armed.CompareAndSwap(true, false) {
		l.until.Store(time.Now().Add(l.outage).UnixNano())
		logf("chaos: the reply of a transaction that puts %s is lost; calls fail for %v", l.path, l.outage)
		return status.Error(codes.Unavailable, "chaos: reply lost")
	}
	return nil
}

// putsKey reports whether req is a transaction that puts key when it succeeds.
func putsKey(req any, key string) bool {
	t, ok := req.(*etcdserverpb.TxnRequest)
	if !ok {
		return false
	}
	for _, op := range t.Success {
		if p := op.GetRequestPut(); p != nil && string(p.Key) == key {
			return true
		}
	}
	return false
}

// logf writes one line to stderr (the process log the harness keeps).
func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
