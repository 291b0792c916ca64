package main

import (
	"context"
	"encoding/json"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/test/chaos"
)

// engineHandoffExpiry races a handoff against the next waiter's session end. f.Member 0:
// etcd revokes the next waiter's lease and, f.Jitter after the revoke returned, the holder
// is told to release (SIGTERM): the waiter's entry went with its lease, its client has not
// noticed yet, and the release must hand the lock to the waiter behind it. (A revoke after
// the handoff would end a lease the new holder's client still counts valid, as an
// operator's delete does: outside what validity promises; only the token protects there.)
// f.Member 1: the next waiter is cut off from etcd, and f.Jitter later the holder releases,
// around when the waiter's own session validity ends while etcd keeps its lease. The lock
// must never be led by the expired waiter while another leads (the overlap check), the
// ledger must accept nothing stale, and the waiter behind must write within the liveness
// bound. Heal: the cut ends and a new worker takes the old holder's place (the revoked
// waiter starts a new session by itself).
func (r *run) engineHandoffExpiry(ctx context.Context, f chaos.Fault) (healFunc, error) {
	holder, token := r.engineHolder(ctx)
	if holder == nil {
		r.note("%s: no holder", f.Kind)
		return nothing, nil
	}
	next, lease := r.engineNextWaiter(ctx, token)
	if next == nil {
		r.note("%s: no waiter queued behind token %d", f.Kind, token)
		return nothing, nil
	}
	hw, nw := holder.worker(), next.worker()
	restart := func(context.Context) error { return r.startEngineWorker(holder) }
	if f.Member == 0 {
		cli, err := r.h.etcd.client()
		if err != nil {
			return nil, err
		}
		defer cli.Close()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, rerr := cli.Revoke(rctx, lease)
		cancel()
		sleepCtx(ctx, f.Jitter)
		hw.p.stop(5 * time.Second) // it releases on SIGTERM
		r.note("%s: lease %x of the next waiter %s revoked (%v); %v later %s released token %d",
			f.Kind, int64(lease), nw.uid, rerr, f.Jitter, hw.uid, token)
		return restart, nil
	}
	for _, p := range next.proxies {
		p.blackhole()
	}
	sleepCtx(ctx, f.Jitter)
	hw.p.stop(5 * time.Second)
	r.note("%s: %s released token %d %v after the next waiter %s (lease %x) was cut off from etcd",
		f.Kind, hw.uid, token, f.Jitter, nw.uid, int64(lease))
	return func(ctx context.Context) error {
		for _, p := range next.proxies {
			p.heal()
		}
		return restart(ctx)
	}, nil
}

// engineNextWaiter returns the slot whose worker's queue entry comes first after the grant
// with token (which may itself be the oldest entry), with that entry's lease.
func (r *run) engineNextWaiter(ctx context.Context, token int64) (*engineSlot, clientv3.LeaseID) {
	cli, err := r.h.etcd.client()
	if err != nil {
		return nil, 0
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	dir := r.prefix + "/queue/" + url.PathEscape(lockName) + "/"
	resp, err := cli.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, 0
	}
	for _, kv := range resp.Kvs {
		if kv.CreateRevision == token {
			continue
		}
		var v struct {
			Holder string `json:"holder"`
		}
		if json.Unmarshal(kv.Value, &v) != nil {
			continue
		}
		for _, s := range r.engines {
			if w := s.worker(); w != nil && w.uid == v.Holder {
				return s, clientv3.LeaseID(kv.Lease)
			}
		}
		return nil, 0 // the first waiter is not a running worker's
	}
	return nil, 0
}
