package lease

import (
	"context"
	"encoding/json"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// GrantRequest is one lock of a GrantBatch: the lock named Key for Holder,
// storing Record (optional, valid JSON) with it.
type GrantRequest struct {
	Key    string
	Holder string
	Record json.RawMessage
}

// GrantResult is what a GrantBatch that etcd answered did with one request.
type GrantResult struct {
	// Token is the fencing token of the grant (the key's CreateRevision), 0
	// when Err is set.
	Token int64
	// Err is why the request was not granted: a *HeldError (ErrLocked), an
	// ErrLocked (lock-delay) or an ErrInvalid (bad key, holder or
	// record, or a key already requested earlier in the same batch).
	Err error
}

// nestedOps is the most operations in one request's nested transaction:
// three compares (free, no tombstone, queue empty) and, on refusal, three
// reads (the key, the tombstone, the oldest queue entry: stateReads).
const nestedOps = 3

// MaxGrantBatch is the most requests one GrantBatch takes with guards
// WithGuard compares, under the engine's max txn ops (WithMaxTxnOps, default
// 128). etcd (v3rpc checkTxnRequest) counts the larger of a transaction's
// compares, Then ops and Else ops against the limit, and checks each nested
// transaction against what its parent left: the outer transaction uses
// max(guards, n), each request's nested transaction 3. It returns 0 when the
// guards leave no room.
func (e *Engine) MaxGrantBatch(guards int) int {
	if guards > e.maxTxnOps-nestedOps {
		return 0
	}
	return e.maxTxnOps - nestedOps
}

// GrantBatch grants several locks on the session's lease in one
// transaction, each under its own compares and with its own token:
//
//	If(guards...)
//	Then(Txn_1, ..., Txn_n)
//	Txn_i = If(CreateRevision(key_i) == 0, tombstone_i absent, queue_i empty)
//	        Then(Put(key_i, {holder_i, record_i}, WithLease(session)))
//	        Else(Get(key_i), Get(tombstone_i), Get(oldest entry of queue_i))
//
// etcd evaluates every compare against the state before the transaction and
// applies the whole transaction at one revision, so each lock is granted
// exactly when Grant would have granted it alone, and refused with Grant's
// answer (the Else reads are Grant's stateReads: a lock whose grant is a
// queued entry names that waiter in a *HeldError), and its token (its key's
// CreateRevision) is that revision: distinct locks of one batch share the
// number, and each lock's tokens still only grow. Nothing is tracked, as with
// Grant.
//
// The error is for the batch as a whole, and then no result is returned:
// ErrGuardFailed when a WithGuard compare failed (nothing was written);
// ErrUnknownOutcome (wrapped) when the answer was lost, so that every request
// may or may not have been granted, to be settled by re-reading (Inspect)
// and never by assuming either way; an ErrInvalid for more requests than
// MaxGrantBatch or for bad options; session errors; etcd's own refusals.
// Otherwise results[i] is the outcome of reqs[i].
func (s *Session) GrantBatch(ctx context.Context, reqs []GrantRequest, opts ...LockOption) ([]GrantResult, error) {
	results, err := s.grantBatch(ctx, reqs, opts)
	if err != nil {
		return nil, fmt.Errorf("grant %d locks: %w", len(reqs), err)
	}
	return results, nil
}

func (s *Session) grantBatch(ctx context.Context, reqs []GrantRequest, opts []LockOption) ([]GrantResult, error) {
	if s.eng.err != nil {
		return nil, s.eng.err
	}
	cfg, err := s.eng.lockConfig(opts)
	if err != nil {
		return nil, err
	}
	if limit := s.eng.MaxGrantBatch(len(cfg.guards)); len(reqs) > limit {
		return nil, invalidf("%d requests with %d guards exceed the %d a batch may take under %d operations per transaction", len(reqs), len(cfg.guards), limit, s.eng.maxTxnOps)
	}
	results := make([]GrantResult, len(reqs))
	var ops []clientv3.Op
	var sent []int // index in reqs of each nested transaction
	seen := make(map[string]bool, len(reqs))
	for i, r := range reqs {
		if err := s.checkRequest(r, seen); err != nil {
			results[i].Err = fmt.Errorf("grant %s: %w", r.Key, err)
			continue
		}
		seen[r.Key] = true
		ops = append(ops, s.grantOp(r))
		sent = append(sent, i)
	}
	if len(ops) == 0 {
		return results, nil
	}
	if !s.Valid() {
		return nil, s.Err()
	}
	tctx, cancel := s.callContext(ctx)
	resp, err := s.cli.Txn(tctx).If(cfg.guards...).Then(ops...).Commit()
	cancel()
	if err != nil {
		return nil, writeErr(err)
	}
	if !resp.Succeeded {
		return nil, ErrGuardFailed
	}
	for j, i := range sent {
		results[i] = grantOutcome(resp.Responses[j].GetResponseTxn(), resp.Header.Revision, reqs[i].Key)
	}
	return results, nil
}

// checkRequest validates one request of a batch; seen holds the keys of the
// batch's earlier requests.
func (s *Session) checkRequest(r GrantRequest, seen map[string]bool) error {
	if err := validateKey(r.Key); err != nil {
		return err
	}
	if err := validateHolder(r.Holder); err != nil {
		return err
	}
	if err := validateRecord(r.Record); err != nil {
		return err
	}
	if seen[r.Key] {
		return invalidf("key %q is requested twice in one batch", r.Key)
	}
	return nil
}

// grantOp is one request's nested transaction: Grant's compares, its put,
// and on refusal the reads that say what stood in the way.
func (s *Session) grantOp(r GrantRequest) clientv3.Op {
	e := s.eng
	path, tomb, qdir := e.Path(r.Key), e.tombPath(r.Key), e.queueDir(r.Key)
	v := value{Holder: r.Holder, Record: r.Record}
	return clientv3.OpTxn(
		[]clientv3.Cmp{
			clientv3.Compare(clientv3.CreateRevision(path), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(tomb), "=", 0),
			clientv3.Compare(clientv3.CreateRevision(qdir), "=", 0).WithPrefix(),
		},
		[]clientv3.Op{clientv3.OpPut(path, v.encode(), clientv3.WithLease(s.id))},
		e.stateReads(r.Key),
	)
}

// grantOutcome reads one request's nested transaction answer: granted at rev,
// or what stood in the way, as Grant (grabTxn) names it: the lock key's
// holder, the lock-delay, or the oldest waiter, whose entry is the grant
// (owner.go).
func grantOutcome(tr *etcdserverpb.TxnResponse, rev int64, key string) GrantResult {
	if tr == nil {
		// etcd answers every nested transaction; a missing one is a broken reply.
		return GrantResult{Err: fmt.Errorf("grant %s: %w: no answer for this key in the reply", key, ErrUnknownOutcome)}
	}
	if tr.Succeeded {
		return GrantResult{Token: rev}
	}
	st := readState(tr.Responses)
	o := obstacle{holder: st.lock, tomb: st.tomb, oldest: st.oldest}
	return GrantResult{Err: fmt.Errorf("grant %s: %w", key, o.err())}
}
