package lease

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// staleEntries returns, as leftovers, the queue entries on lease id: after a
// restart, entries of Acquire calls that died with the process that made
// them. No call of a session that resumes the lease owns one (it has made no
// call yet), so each is that session's to delete while it is one created at
// or before the revision they were listed at. Lock keys on the lease are
// not: they are held, for the resumer to Adopt or release.
func (e *Engine) staleEntries(ctx context.Context, id clientv3.LeaseID) ([]leftover, error) {
	resp, err := e.cli.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
	if err != nil {
		return nil, fmt.Errorf("list keys of lease: %w", err)
	}
	root := e.prefix + "/queue/"
	var los []leftover
	for _, k := range resp.Keys {
		path := string(k)
		if !strings.HasPrefix(path, root) {
			continue
		}
		// key is a lock name only for lock keys (their busy marks).
		los = append(los, leftover{key: path, path: path, upTo: resp.Revision})
	}
	return los, nil
}

// Keys returns the lock keys held on the session's lease, by lock name, with
// their tokens. After ResumeSession they are the resumer's: Adopt gives a
// *Lock for one, Engine.Release deletes one; each stays held until the
// lease ends otherwise.
func (s *Session) Keys(ctx context.Context) (map[string]int64, error) {
	held, err := s.keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list keys of session %x: %w", int64(s.id), err)
	}
	return held, nil
}

func (s *Session) keys(ctx context.Context) (map[string]int64, error) {
	resp, err := s.cli.TimeToLive(ctx, s.id, clientv3.WithAttachedKeys())
	if err != nil {
		return nil, err
	}
	root := s.eng.Path("")
	var gets []clientv3.Op
	for _, k := range resp.Keys {
		if strings.HasPrefix(string(k), root) {
			gets = append(gets, clientv3.OpGet(string(k)))
		}
	}
	held := make(map[string]int64, len(gets))
	for len(gets) > 0 {
		n := min(len(gets), s.eng.maxTxnOps)
		r, err := s.cli.Txn(ctx).Then(gets[:n]...).Commit()
		if err != nil {
			return nil, err
		}
		gets = gets[n:]
		for _, op := range r.Responses {
			for _, kv := range op.GetResponseRange().Kvs {
				if clientv3.LeaseID(kv.Lease) == s.id {
					held[strings.TrimPrefix(string(kv.Key), root)] = kv.CreateRevision
				}
			}
		}
	}
	return held, nil
}
