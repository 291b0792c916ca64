package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

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
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(eps, ","), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	defer cli.Close()
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(http.StatusOK) })
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
	for ctx.Err() == nil {
		s, err := eng.NewSession(ctx, ttl)
		if err != nil {
			pause(ctx, 200*time.Millisecond)
			continue
		}
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
		l, err := s.Acquire(ctx, lock, w.uid)
		if err != nil {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-l.Done():
			case <-lctx.Done():
			}
			cancel()
		}()
		w.lead(lctx, l.Token(), l)
		cancel()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = l.Release(rctx) // best effort: a lost lock has nothing to release
		rcancel()
	}
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
