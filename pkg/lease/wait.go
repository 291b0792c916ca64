package lease

import (
	"context"
	"reflect"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// waitGone returns changed when one of kvs (as read at revision since, 0 if
// unknown) was deleted or replaced, with the revision at which it saw that
// (the event's, or its re-read's); it returns neither changed nor an error
// when a watch or read failed or nothing changed within TTL/3 (the caller
// reads again), and ctx's error when ctx ends. It watches each key from the
// current revision and waits until etcd confirms every watch. A watch whose
// confirmation names a revision at or below since starts right after it
// (etcd registers a watch at its current revision, then reports a revision
// no lower), so nothing can have been missed; otherwise it re-reads the keys:
// a deletion before the watches started shows in the read, one after in a
// watch. When that re-read finds every key still there, it records its send
// time in *seen: a linearizable read that showed them in the way. The whole
// wait, the confirmation included (clientv3's Watch blocks until etcd
// confirms the watch, which a stalled stream never does), is bounded by
// TTL/3: a stalled watch delays a waiter by at most that, never blocks it and
// the queue behind it.
func (s *Session) waitGone(ctx context.Context, since int64, seen *instant, kvs ...*mvccpb.KeyValue) (changed bool, rev int64, err error) {
	if len(kvs) == 0 {
		return true, 0, nil
	}
	s.keepWatchStream()
	wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), s.interval())
	defer cancel()
	chans := make([]clientv3.WatchChan, len(kvs))
	gets := make([]clientv3.Op, len(kvs))
	for i, kv := range kvs {
		chans[i] = s.cli.Watch(wctx, string(kv.Key), clientv3.WithCreatedNotify())
		gets[i] = clientv3.OpGet(string(kv.Key), clientv3.WithKeysOnly())
	}
	gap := since <= 0
	for _, ch := range chans {
		select {
		case wr, ok := <-ch:
			if !ok || !wr.Created || wr.Err() != nil {
				return false, 0, ctx.Err()
			}
			gap = gap || wr.Header.Revision > since
		case <-wctx.Done():
			// No confirmation within TTL/3: the stream is likely stalled on
			// a hung member. Let the next wait open a new one.
			s.dropWatchStream()
			return false, 0, ctx.Err()
		}
	}
	if gap {
		sent := now()
		resp, err := s.cli.Txn(wctx).Then(gets...).Commit()
		if err != nil {
			return false, 0, ctx.Err()
		}
		for i, kv := range kvs {
			cur := resp.Responses[i].GetResponseRange().Kvs
			if len(cur) == 0 || cur[0].CreateRevision != kv.CreateRevision {
				return true, resp.Header.Revision, nil
			}
		}
		*seen = sent
	}
	// A mutex waiter watches at most two keys (the lock and its tombstone);
	// a semaphore's oldest waiter watches one key per slot (recvAny).
	var c0, c1 clientv3.WatchChan = chans[0], nil
	if len(chans) > 1 {
		c1 = chans[1]
	}
	for {
		var wr clientv3.WatchResponse
		var ok bool
		var kv *mvccpb.KeyValue
		if len(chans) > 2 {
			var i int
			if i, wr, ok = recvAny(wctx, chans); i < 0 {
				return false, 0, ctx.Err()
			}
			kv = kvs[i]
		} else {
			select {
			case <-wctx.Done():
				return false, 0, ctx.Err()
			case wr, ok = <-c0:
				kv = kvs[0]
			case wr, ok = <-c1:
				kv = kvs[1]
			}
		}
		if !ok || wr.Canceled || wr.Err() != nil {
			return false, 0, ctx.Err()
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE || ev.Kv.CreateRevision != kv.CreateRevision {
				return true, ev.Kv.ModRevision, nil
			}
		}
	}
}

// recvAny receives from whichever of chans is ready first, returning its
// index, or -1 when ctx ends first.
func recvAny(ctx context.Context, chans []clientv3.WatchChan) (int, clientv3.WatchResponse, bool) {
	cases := make([]reflect.SelectCase, 0, len(chans)+1)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	for _, c := range chans {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)})
	}
	i, v, ok := reflect.Select(cases)
	if i == 0 {
		return -1, clientv3.WatchResponse{}, false
	}
	var wr clientv3.WatchResponse
	if ok {
		wr, _ = v.Interface().(clientv3.WatchResponse) // a WatchChan carries nothing else
	}
	return i - 1, wr, ok
}

// keepWatchStream keeps one idle watch open for the session's life once a
// waiter of the session first waits, so that the watch stream the waiters'
// and the locks' watches share (clientv3 keeps one stream per client and
// request metadata, WithRequireLeader here, and closes it with its last
// watch) is not opened and closed again for every wait. The watch is on a
// key nothing writes (P/idle); its goroutine is the session's (joined by its
// WaitGroup) and ends with the session, when the watch ends (a failed
// stream), or when a wait found the stream stalled (dropWatchStream): the
// next wait then opens a new stream, which the client may send to another
// member.
func (s *Session) keepWatchStream() {
	s.mu.Lock()
	if s.keepStop != nil || s.err != nil {
		s.mu.Unlock()
		return
	}
	ctx, stop := context.WithCancel(clientv3.WithRequireLeader(s.ctx))
	s.keepStop = stop
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		for range s.cli.Watch(ctx, s.eng.prefix+"/idle", clientv3.WithKeysOnly()) {
		}
		s.mu.Lock()
		s.keepStop = nil
		s.mu.Unlock()
		stop()
	}()
}

// dropWatchStream ends keepWatchStream's idle watch, if any.
func (s *Session) dropWatchStream() {
	s.mu.Lock()
	stop := s.keepStop
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}
