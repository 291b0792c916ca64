package lease

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// staleEntries returns, as leftovers, the queue entries on lease id that are
// not the grant of their lock: after a restart, entries of Acquire calls
// that died with the process that made them. No call of a session that
// resumes the lease owns one (it has made no call yet), so each is that
// session's to delete while it is one created at or before the revision they
// were listed at. Lock keys on the lease are not, nor are entries that are
// their lock's grant (owner.go): they are held, for the resumer to Adopt or
// release (Keys lists both).
func (e *Engine) staleEntries(ctx context.Context, id clientv3.LeaseID) ([]leftover, error) {
	resp, err := e.cli.TimeToLive(ctx, id, clientv3.WithAttachedKeys())
	if err != nil {
		return nil, fmt.Errorf("list keys of lease: %w", err)
	}
	_, entries := e.split(resp.Keys)
	granted, err := e.grants(ctx, entries, id)
	if err != nil {
		return nil, fmt.Errorf("read queues: %w", err)
	}
	var los []leftover
	for name, path := range entries {
		if _, ok := granted[name]; ok {
			continue
		}
		los = append(los, leftover{key: name, path: path, upTo: resp.Revision})
	}
	// A semaphore's queue entry is never a grant (semaphore.go): every one
	// on the lease belongs to a call that died.
	for name, path := range e.semEntries(resp.Keys) {
		los = append(los, leftover{key: semMark(name), path: path, upTo: resp.Revision})
	}
	return los, nil
}

// semEntries returns the semaphore queue entries among a lease's attached
// keys, by semaphore name.
func (e *Engine) semEntries(keys [][]byte) map[string]string {
	root := e.prefix + "/semaphores/"
	entries := make(map[string]string)
	for _, k := range keys {
		rest, ok := strings.CutPrefix(string(k), root)
		if !ok {
			continue
		}
		esc, _, ok := strings.Cut(rest, "/")
		if name, err := url.PathUnescape(esc); ok && err == nil {
			entries[name] = string(k)
		}
	}
	return entries
}

// split sorts a lease's attached keys into lock keys and queue entries (by
// lock name); anything else under or outside the prefix is neither.
func (e *Engine) split(keys [][]byte) (locks []string, entries map[string]string) {
	lockRoot, queueRoot := e.Path(""), e.prefix+"/queue/"
	entries = make(map[string]string)
	for _, k := range keys {
		path := string(k)
		if strings.HasPrefix(path, lockRoot) {
			locks = append(locks, path)
			continue
		}
		rest, ok := strings.CutPrefix(path, queueRoot)
		if !ok {
			continue
		}
		esc, _, ok := strings.Cut(rest, "/")
		if name, err := url.PathUnescape(esc); ok && err == nil {
			entries[name] = path
		}
	}
	return locks, entries
}

// grants returns, by lock name, the tokens of the entries (lock name ->
// entry path, on lease id) that are their lock's grant, reading each lock's
// state in batches within the engine's max txn ops.
func (e *Engine) grants(ctx context.Context, entries map[string]string, id clientv3.LeaseID) (map[string]int64, error) {
	names := make([]string, 0, len(entries))
	for name := range entries {
		names = append(names, name)
	}
	per := len(e.stateReads(""))
	held := make(map[string]int64)
	for len(names) > 0 {
		n := min(len(names), e.maxTxnOps/per)
		var ops []clientv3.Op
		for _, name := range names[:n] {
			ops = append(ops, e.stateReads(name)...)
		}
		r, err := e.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, err
		}
		for i, name := range names[:n] {
			own := readState(r.Responses[i*per : (i+1)*per]).owner()
			if own != nil && string(own.Key) == entries[name] && clientv3.LeaseID(own.Lease) == id {
				held[name] = own.CreateRevision
			}
		}
		names = names[n:]
	}
	return held, nil
}

// Keys returns the grants held on the session's lease, by lock name, with
// their tokens: lock keys, and queue entries of blocking Acquire calls that
// became their lock's grant (owner.go). After ResumeSession they are the
// resumer's: Adopt gives a *Lock for one, Engine.Release deletes one; each
// stays held until the lease ends otherwise.
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
	paths, entries := s.eng.split(resp.Keys)
	held, err := s.eng.grants(ctx, entries, s.id)
	if err != nil {
		return nil, err
	}
	gets := make([]clientv3.Op, 0, len(paths))
	for _, p := range paths {
		gets = append(gets, clientv3.OpGet(p))
	}
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
