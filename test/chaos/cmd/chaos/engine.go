package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/lockwarden/lockwarden/internal/testenv"
	"github.com/lockwarden/lockwarden/pkg/lease"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// engineTTL is the engine workers' session TTL: the lock's lease in the pod runs.
const engineTTL = 3 * time.Second

// engineSlot is one pkg/lease worker of an engine run with its own etcd proxies, one per
// member, so that its traffic alone can be cut or dropped.
type engineSlot struct {
	name    string
	proxies []*tcpProxy

	mu sync.Mutex
	w  *workerProc
}

func (s *engineSlot) worker() *workerProc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w
}

// setupEngine starts an engine run: the ledger is up; three workers holding the lock with
// pkg/lease directly, each through its own proxies; then the first accepted write.
func (r *run) setupEngine(ctx context.Context) error {
	for i := range nWorkers {
		s := &engineSlot{name: fmt.Sprintf("e-%d", i)}
		r.engines = append(r.engines, s) // proxies closed by teardown
		for _, mem := range r.h.etcd.members {
			p, err := newTCPProxy(mem.clientAddr())
			if err != nil {
				return err
			}
			s.proxies = append(s.proxies, p)
		}
		if err := r.startEngineWorker(s); err != nil {
			return err
		}
	}
	if _, err := r.waitProgress(ctx, 60*time.Second); err != nil {
		return fmt.Errorf("no first write: %w", err)
	}
	return nil
}

// startEngineWorker starts a new worker process (a new writer identity) in the slot.
func (r *run) startEngineWorker(s *engineSlot) error {
	ports, err := testenv.FreePorts(1)
	if err != nil {
		return err
	}
	var eps []string
	for _, p := range s.proxies {
		eps = append(eps, "http://"+p.addr)
	}
	r.mu.Lock()
	r.nextHist++
	n := r.nextHist
	r.mu.Unlock()
	w := &workerProc{pod: s.name, uid: fmt.Sprintf("%s-%s-%d", r.ns, s.name, n), probe: "127.0.0.1:" + strconv.Itoa(ports[0]),
		history: filepath.Join(r.dir, fmt.Sprintf("history-%s-%d.jsonl", s.name, n))}
	w.p, err = startProc(r.dir, fmt.Sprintf("worker-%s-%d", s.name, n), r.h.bins.worker, []string{
		"POD_NAME=" + s.name, "POD_UID=" + w.uid, "LOCK_NAME=" + lockName, "LEDGER_URL=" + r.ledgerURL,
		"ETCD_ENDPOINTS=" + strings.Join(eps, ","), "ETCD_PREFIX=" + r.prefix,
	}, "--engine", "--ttl", engineTTL.String(), "--probe-address", w.probe, "--history", w.history)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.workers = append(r.workers, w)
	r.mu.Unlock()
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
	return nil
}

// noteEngineLock records the lock's etcd state and which workers run (after a failed
// liveness check: who blocks it).
func (r *run) noteEngineLock(ctx context.Context) {
	cli, err := r.h.etcd.client()
	if err != nil {
		return
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	h, err := lease.NewEngine(cli, lease.WithPrefix(r.prefix)).Inspect(ctx, lockName)
	var running []string
	for _, s := range r.engines {
		if w := s.worker(); w != nil && w.p.running() {
			running = append(running, w.uid)
		}
	}
	r.note("lock in etcd: holder %q token %d lease %x ttl %v waiters %d lockDelay %v (err %v); workers running %v",
		h.Holder, h.Token, int64(h.Lease), h.TTL, h.Waiters, h.LockDelay, err, running)
}

// engineHolder returns the slot whose worker holds the lock now, with its token, or nil.
func (r *run) engineHolder(ctx context.Context) (*engineSlot, int64) {
	cli, err := r.h.etcd.client()
	if err != nil {
		return nil, 0
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	h, err := lease.NewEngine(cli, lease.WithPrefix(r.prefix)).Inspect(ctx, lockName)
	if err != nil || h.Token == 0 {
		return nil, 0
	}
	for _, s := range r.engines {
		if w := s.worker(); w != nil && w.uid == h.Holder {
			return s, h.Token
		}
	}
	return nil, 0
}

// engineFault injects the engine kinds.
func (r *run) engineFault(ctx context.Context, f chaos.Fault) (healFunc, error) {
	holder, token := r.engineHolder(ctx)
	if holder == nil {
		r.note("%s: no holder", f.Kind)
		return nothing, nil
	}
	hw := holder.worker()
	switch f.Kind {
	case chaos.EngineForceRelease:
		// An operator force-releases the holder, whose process is about to pause (it is
		// presumed gone): the transaction reaches etcd f.Jitter after the tombstone's lease
		// was granted, and the holder stops at that moment, with the validity its last
		// confirmed check gave it. The next holder must wait that validity out.
		var once sync.Once
		delayed := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if method == "/etcdserverpb.KV/Txn" {
				once.Do(func() {
					sleepCtx(ctx, f.Jitter)
					hw.p.signal(syscall.SIGSTOP)
				})
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		var eps []string
		for _, m := range r.h.etcd.members {
			eps = append(eps, m.clientURL())
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second, Logger: zap.NewNop(),
			DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(delayed)}})
		if err != nil {
			return nil, err
		}
		defer cli.Close()
		fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		err = lease.NewEngine(cli, lease.WithPrefix(r.prefix)).ForceRelease(fctx, lockName, token)
		cancel()
		r.note("force-released token %d of %s (transaction delayed %v): %v", token, hw.uid, f.Jitter, err)
		return func(context.Context) error { hw.p.signal(syscall.SIGCONT); return nil }, nil

	case chaos.EngineLoseAcquireReply:
		// Every other worker loses the reply of its next transaction that puts the lock's key
		// (SIGUSR1: chaosworker's loseReply), and the holder releases (SIGTERM): the next
		// grant commits, its holder is told the outcome is unknown.
		for _, s := range r.engines {
			if w := s.worker(); s != holder && w != nil {
				w.p.signal(syscall.SIGUSR1)
			}
		}
		hw.p.stop(5 * time.Second)
		return func(context.Context) error {
			for _, s := range r.engines {
				if w := s.worker(); w != nil {
					w.p.signal(syscall.SIGUSR2)
				}
			}
			return r.startEngineWorker(holder)
		}, nil
	}
	return nothing, nil
}

// engineStalledWatch stops mem (watches served by it stall without an error) and has the
// holder release: the next waiter must acquire within the liveness bound while mem stays
// stopped, whichever member its watch is on.
func (r *run) engineStalledWatch(ctx context.Context, f chaos.Fault, mem *member) (healFunc, error) {
	holder, _ := r.engineHolder(ctx)
	mem.proc.signal(syscall.SIGSTOP)
	resume := func(context.Context) error { mem.proc.signal(syscall.SIGCONT); return nil }
	r.note("stalled watch: %s stopped", mem.name)
	if holder == nil {
		return resume, nil
	}
	holder.worker().p.stop(5 * time.Second)
	r.mu.Lock()
	before := len(r.violations)
	r.mu.Unlock()
	if err := r.checkLiveness(ctx, f.Kind+" (member stopped)", r.h.livenessBound()); err != nil {
		return resume, err
	}
	r.mu.Lock()
	stuck := len(r.violations) > before
	r.mu.Unlock()
	if stuck { // where the waiters wait: Go prints every goroutine's stack on SIGQUIT
		for _, s := range r.engines {
			if w := s.worker(); w != nil && w.p.running() {
				w.p.signal(syscall.SIGQUIT)
			}
		}
		r.note("stalled watch: the waiters' goroutine stacks are in their logs (SIGQUIT)")
	}
	return func(ctx context.Context) error {
		if err := resume(ctx); err != nil {
			return err
		}
		return r.startEngineWorker(holder)
	}, nil
}
