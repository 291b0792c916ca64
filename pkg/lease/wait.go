package lease

import (
	"context"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// waitGone returns changed when one of kvs was deleted or replaced; it
// returns neither changed nor an error when a watch or read failed or nothing
// changed within TTL/3 (the caller reads again), and ctx's error when ctx
// ends. It watches each key from the current revision, waits until etcd
// confirms every watch, then re-reads the keys: a deletion before the watches
// started shows in the read, one after in a watch. The whole wait, the
// confirmation included (clientv3's Watch blocks until etcd confirms the
// watch, which a stalled stream never does), is bounded by TTL/3: a stalled
// watch delays a waiter by at most that, never blocks it and the queue
// behind it.
func (s *Session) waitGone(ctx context.Context, kvs ...*mvccpb.KeyValue) (changed bool, err error) {
	if len(kvs) == 0 {
		return true, nil
	}
	wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), s.interval())
	defer cancel()
	chans := make([]clientv3.WatchChan, len(kvs))
	gets := make([]clientv3.Op, len(kvs))
	for i, kv := range kvs {
		chans[i] = s.cli.Watch(wctx, string(kv.Key), clientv3.WithCreatedNotify())
		gets[i] = clientv3.OpGet(string(kv.Key), clientv3.WithKeysOnly())
	}
	for _, ch := range chans {
		select {
		case wr, ok := <-ch:
			if !ok || !wr.Created || wr.Err() != nil {
				return false, ctx.Err()
			}
		case <-wctx.Done():
			return false, ctx.Err()
		}
	}
	resp, err := s.cli.Txn(wctx).Then(gets...).Commit()
	if err != nil {
		return false, ctx.Err()
	}
	for i, kv := range kvs {
		cur := resp.Responses[i].GetResponseRange().Kvs
		if len(cur) == 0 || cur[0].CreateRevision != kv.CreateRevision {
			return true, nil
		}
	}
	// At most two keys are watched (the lock and its tombstone).
	var c0, c1 clientv3.WatchChan = chans[0], nil
	if len(chans) > 1 {
		c1 = chans[1]
	}
	for {
		var wr clientv3.WatchResponse
		var ok bool
		var kv *mvccpb.KeyValue
		select {
		case <-wctx.Done():
			return false, ctx.Err()
		case wr, ok = <-c0:
			kv = kvs[0]
		case wr, ok = <-c1:
			kv = kvs[1]
		}
		if !ok || wr.Canceled || wr.Err() != nil {
			return false, ctx.Err()
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE || ev.Kv.CreateRevision != kv.CreateRevision {
				return true, nil
			}
		}
	}
}
