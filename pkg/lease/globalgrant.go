package lease

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// globalRevokeTimeout bounds the revoke of a lease that holds nothing (a failed grant's, a
// deleted grant's). A revoke that does not arrive leaves the lease to expire by itself.
const globalRevokeTimeout = 2 * time.Second

// Wait writes this manager's waiting record to T (R7.2) in one transaction:
//
//	If(CreateRevision(K) == 0, ModRevision(T) <= basis.Rev, guard) Then(Put(T, rec))
//
// and returns w, the revision of the write. The basis must be an Observe showing K absent;
// the wait counts from its ReceivedAt, and rec.DelaySeconds (D_w, the caller's R7.1) may not
// be below the delay T carried at the basis. rec.Kind is set to RecordWaiting. A failed
// compare writes nothing and returns an error wrapping ErrGlobalChanged (and ErrGuardFailed
// too when K and T stood but the guard did not hold). A lost answer wraps ErrUnknownOutcome:
// the wait is void, the caller observes again.
func (g *Global) Wait(ctx context.Context, name string, basis GlobalView, rec GlobalRecord, guard clientv3.Cmp) (int64, error) {
	w, err := g.wait(ctx, name, basis, rec, guard)
	if err != nil {
		return 0, globalErr("wait for", name, err)
	}
	return w, nil
}

func (g *Global) wait(ctx context.Context, name string, basis GlobalView, rec GlobalRecord, guard clientv3.Cmp) (int64, error) {
	rec.Kind = RecordWaiting
	if err := validateWait(name, g.prefix, basis, rec, guard); err != nil {
		return 0, err
	}
	kPath, tPath := g.GrantPath(name), g.TombstonePath(name)
	resp, err := g.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(kPath), "=", 0),
			clientv3.Compare(clientv3.ModRevision(tPath), "<", basis.Rev+1),
			guard).
		Then(clientv3.OpPut(tPath, rec.encode())).
		Else(clientv3.OpGet(kPath, clientv3.WithKeysOnly()), clientv3.OpGet(tPath, clientv3.WithKeysOnly())).
		Commit()
	if err != nil {
		return 0, writeErr(err)
	}
	if !resp.Succeeded {
		return 0, globalChanged(resp.Responses, "a revision at or below the basis", func(mod int64) bool { return mod <= basis.Rev })
	}
	return resp.Header.Revision, nil
}

// validateWait checks Wait's arguments once rec's kind is set.
func validateWait(name, prefix string, basis GlobalView, rec GlobalRecord, guard clientv3.Cmp) error {
	if err := validateGlobalName("global name", name); err != nil {
		return err
	}
	if err := validateGuard(guard); err != nil {
		return err
	}
	switch {
	case basis.Rev <= 0:
		return invalidf("basis revision %d is not positive: the basis is an Observe", basis.Rev)
	case basis.Name != name || basis.Prefix != prefix:
		return invalidf("basis is a read of %q under %q, not of %q under %q: a wait counts from a read of its own name", basis.Name, basis.Prefix, name, prefix)
	case basis.Held:
		return invalidf("basis shows the grant held (token %d): a wait counts from a read showing it absent", basis.Token)
	case basis.TMod > basis.Rev:
		return invalidf("basis shows T written at revision %d, after its own revision %d", basis.TMod, basis.Rev)
	}
	if err := rec.validate(); err != nil {
		return err
	}
	if basis.TCreate != 0 && rec.DelaySeconds < basis.Tomb.DelaySeconds {
		return invalidf("waiting record carries delay %d s, below the %d s T carried at the basis", rec.DelaySeconds, basis.Tomb.DelaySeconds)
	}
	return nil
}

// GrantBasis says which compare on T makes a grant sound (docs/global.md).
type GrantBasis int

// The bases of a grant.
const (
	// GrantFirst is R6': T was never written, so no grant ever was: CreateRevision(T) == 0.
	GrantFirst GrantBasis = iota
	// GrantTakeover is R7.3: T still holds this manager's waiting record, written at Rev
	// (Wait's w), and the wait has passed: ModRevision(T) == Rev.
	GrantTakeover
	// GrantSuccession is R8: T still holds this cluster's own last grant, whose token is Rev,
	// and this manager's guarded Delete of that token's K was acknowledged:
	// ModRevision(T) == Rev.
	GrantSuccession
)

// String names the basis.
func (b GrantBasis) String() string {
	switch b {
	case GrantFirst:
		return "first"
	case GrantTakeover:
		return "takeover"
	case GrantSuccession:
		return "succession"
	}
	return fmt.Sprintf("GrantBasis(%d)", int(b))
}

// GlobalGrantRequest is what Grant grants under.
type GlobalGrantRequest struct {
	// Basis selects the compare on T.
	Basis GrantBasis
	// Rev is w for GrantTakeover, the own last token for GrantSuccession, 0 for GrantFirst.
	Rev int64
	// Record is K's and T's record; Kind is set to RecordGrant. DelaySeconds is the carried
	// delay, which the caller computes (R6): the engine does not read T's record.
	// LeaseSeconds, when set, must be TTL's seconds.
	Record GlobalRecord
	// TTL is G, the grant lease's TTL: whole seconds, at least MinTTL.
	TTL time.Duration
}

// cmp returns the compare on T of the basis.
func (r GlobalGrantRequest) cmp(tPath string) clientv3.Cmp {
	if r.Basis == GrantFirst {
		return clientv3.Compare(clientv3.CreateRevision(tPath), "=", 0)
	}
	return clientv3.Compare(clientv3.ModRevision(tPath), "=", r.Rev)
}

// validate checks the request once the record's kind is set.
func (r GlobalGrantRequest) validate() error {
	switch r.Basis {
	case GrantFirst:
		if r.Rev != 0 {
			return invalidf("first grant with revision %d: want 0", r.Rev)
		}
	case GrantTakeover, GrantSuccession:
		if r.Rev <= 0 {
			return invalidf("%s grant with revision %d: want a positive revision", r.Basis, r.Rev)
		}
	default:
		return invalidf("unknown grant basis %d", int(r.Basis))
	}
	if r.TTL < MinTTL || r.TTL%time.Second != 0 {
		return invalidf("grant TTL %v: want whole seconds, at least %v", r.TTL, MinTTL)
	}
	if r.Record.LeaseSeconds != 0 && time.Duration(r.Record.LeaseSeconds)*time.Second != r.TTL {
		return invalidf("grant record carries lease %d s, the grant's TTL is %v: want them equal", r.Record.LeaseSeconds, r.TTL)
	}
	return r.Record.validate()
}

// Grant grants a new etcd lease of req.TTL, then sends one transaction:
//
//	If(CreateRevision(K) == 0, the basis's compare on T, guard)
//	Then(Put(K, record, WithLease(new lease)), Put(T, record))
//
// and returns the token, the transaction's revision: K's CreateRevision and T's ModRevision
// both. T never gets a lease. A failed compare revokes the new lease and returns an error
// wrapping ErrGlobalChanged (and ErrGuardFailed when K and T stood but the guard did not
// hold); an error etcd answered definitely revokes it too. A lost answer returns the lease
// with an error wrapping ErrUnknownOutcome, NOT ErrGlobalChanged: the grant may have landed,
// which an Observe shows as K with this record on that lease; the lease is left to the
// caller (it expires after TTL unless renewed).
func (g *Global) Grant(ctx context.Context, name string, req GlobalGrantRequest, guard clientv3.Cmp) (token int64, lease clientv3.LeaseID, err error) {
	token, lease, err = g.grant(ctx, name, req, guard)
	if err != nil {
		return 0, lease, globalErr("grant", name, err)
	}
	return token, lease, nil
}

func (g *Global) grant(ctx context.Context, name string, req GlobalGrantRequest, guard clientv3.Cmp) (int64, clientv3.LeaseID, error) {
	req.Record.Kind = RecordGrant
	if err := validateGlobalName("global name", name); err != nil {
		return 0, 0, err
	}
	if err := validateGuard(guard); err != nil {
		return 0, 0, err
	}
	if err := req.validate(); err != nil {
		return 0, 0, err
	}
	lr, err := g.cli.Grant(ctx, int64(req.TTL/time.Second))
	if err != nil {
		return 0, 0, fmt.Errorf("grant lease: %w", err)
	}
	kPath, tPath, val := g.GrantPath(name), g.TombstonePath(name), req.Record.encode()
	resp, err := g.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(kPath), "=", 0), req.cmp(tPath), guard).
		Then(clientv3.OpPut(kPath, val, clientv3.WithLease(lr.ID)), clientv3.OpPut(tPath, val)).
		Else(clientv3.OpGet(kPath, clientv3.WithKeysOnly()), clientv3.OpGet(tPath, clientv3.WithKeysOnly())).
		Commit()
	switch {
	case unknownOutcome(err):
		return 0, lr.ID, fmt.Errorf("lease %x: %w", int64(lr.ID), writeErr(err))
	case err != nil:
		return 0, 0, g.revokeUnused(ctx, lr.ID, err)
	case !resp.Succeeded:
		return 0, 0, g.revokeUnused(ctx, lr.ID, globalChanged(resp.Responses, req.Basis.String()+" revision "+fmt.Sprint(req.Rev), func(mod int64) bool {
			if req.Basis == GrantFirst {
				return mod == 0
			}
			return mod == req.Rev
		}))
	}
	return resp.Header.Revision, lr.ID, nil
}

// revokeUnused revokes a lease that holds nothing, even after ctx ended, and returns cause,
// noting a revoke that failed (the lease then expires by itself).
func (g *Global) revokeUnused(ctx context.Context, id clientv3.LeaseID, cause error) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), globalRevokeTimeout)
	defer cancel()
	if _, err := g.cli.Revoke(cctx, id); err != nil {
		return fmt.Errorf("%w (lease %x not revoked, it expires by itself: %s)", cause, int64(id), err.Error())
	}
	return cause
}

// globalChanged explains a failed Wait or Grant from its Else reads of K and T (keys only):
// K present, T not where the basis wants it (tOK says, want names it), or else the guard.
func globalChanged(r []*etcdserverpb.ResponseOp, want string, tOK func(mod int64) bool) error {
	if k := onlyKV(r[0].GetResponseRange().Kvs); k != nil {
		return fmt.Errorf("%w: granted with token %d", ErrGlobalChanged, k.CreateRevision)
	}
	var mod int64
	if t := onlyKV(r[1].GetResponseRange().Kvs); t != nil {
		mod = t.ModRevision
	}
	if !tOK(mod) {
		return fmt.Errorf("%w: tombstone at revision %d, want %s", ErrGlobalChanged, mod, want)
	}
	return fmt.Errorf("%w: %w", ErrGlobalChanged, ErrGuardFailed)
}
