package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockwarden/lockwarden/pkg/lease"
	"github.com/lockwarden/lockwarden/test/chaos"
)

// watchShared records every change of the run's global name's keys in the shared etcd (K
// and T, docs/global.md) from the revision the run started at, watching again from the next
// revision after a failure (a killed member), until ctx ends. The harness's client goes to
// the members directly, not through any manager's proxies.
func (r *grun) watchShared(ctx context.Context, from int64) {
	cli, err := r.g.h.etcd.client()
	if err != nil {
		r.note("shared etcd watch: %v", err)
		return
	}
	defer cli.Close()
	grant := r.globalPrefix + "/grants/" + r.globalName
	tomb := r.globalPrefix + "/tombstones/" + r.globalName
	next := from
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := cli.Watch(wctx, r.globalPrefix+"/", clientv3.WithPrefix(), clientv3.WithRev(next))
		for resp := range wch {
			if resp.Err() != nil {
				break
			}
			for _, ev := range resp.Events {
				key := string(ev.Kv.Key)
				if key != grant && key != tomb {
					continue // registrations
				}
				e := chaos.GlobalEvent{Mono: chaos.Mono(), Rev: ev.Kv.ModRevision, Key: chaos.KeyGrant, Deleted: ev.Type == clientv3.EventTypeDelete}
				if key == tomb {
					e.Key = chaos.KeyTombstone
				} else if !e.Deleted {
					e.CreateRev = ev.Kv.CreateRevision
				}
				if !e.Deleted {
					var rec lease.GlobalRecord
					if err := json.Unmarshal(ev.Kv.Value, &rec); err != nil {
						r.note("shared etcd: %s at revision %d does not parse: %v", key, e.Rev, err)
					}
					e.Kind, e.Cluster, e.Holder, e.HolderUID, e.Delay = string(rec.Kind), rec.Cluster.Name, rec.Holder, rec.HolderUID, rec.DelaySeconds
				}
				r.recordShared(e)
				next = ev.Kv.ModRevision + 1
			}
		}
		cancel() // a watch that failed: its stream ends before the next one starts
		sleepCtx(ctx, 100*time.Millisecond)
	}
}

// recordShared keeps one shared-etcd event and notes it on the timeline.
func (r *grun) recordShared(e chaos.GlobalEvent) {
	r.mu.Lock()
	r.shared = append(r.shared, e)
	r.mu.Unlock()
	what := e.Key + " put"
	switch {
	case e.Deleted:
		what = e.Key + " deleted"
	case e.Key == chaos.KeyGrant && e.CreateRev == e.Rev:
		what = fmt.Sprintf("GRANT token %d", e.Rev)
	}
	var rec []string
	if e.Kind != "" {
		rec = append(rec, "kind "+e.Kind, "cluster "+e.Cluster)
	}
	if e.Holder != "" {
		rec = append(rec, "holder "+e.Holder+" ("+e.HolderUID+")")
	}
	if e.Delay != 0 {
		rec = append(rec, fmt.Sprintf("delay %ds", e.Delay))
	}
	r.note("shared etcd rev %d: %s %s", e.Rev, what, strings.Join(rec, ", "))
}

// sharedRev returns the shared etcd's current revision, the start of the run's watch.
func (r *grun) sharedRev(ctx context.Context) (int64, error) {
	cli, err := r.g.h.etcd.client()
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "health")
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}
