// Package lease is lockwarden's lock engine: distributed locks on etcd
// leases, each grant carrying a fencing token. It is usable on its own by any
// Go program with etcd access, and imports nothing from Kubernetes.
//
//	eng := lease.NewEngine(cli)                       // keys under /lockwarden
//	s, err := eng.NewSession(ctx, 15*time.Second)     // one etcd lease, renewed
//	l, err := s.Acquire(ctx, "payments", "worker-1")  // blocks, FIFO
//	defer l.Release(ctx)
//	// act only while l.Valid(); pass l.Token() to every resource you write;
//	// stop when l.Done() closes.
//
// A Session is one etcd lease renewed by its own loop; a Lock is one key on
// it. One session can hold many keys, for one holder or for many.
//
// A controller that holds many keys on behalf of others needs none of a
// Lock's machinery per key: Session.Grant takes a key in TryAcquire's one
// transaction and tracks nothing; Session.GrantBatch takes up to
// MaxGrantBatch keys in one transaction, each under its own compares (the
// keys of one batch share their token's number, the transaction's revision;
// each key's tokens still only grow); Engine.Release and Engine.UpdateRecord
// change a key only while it holds a given token; Engine.WatchLocks (and
// WatchLockChanges, with revisions) watches every lock with one etcd watch;
// Engine.Inspect reads one linearizably. Its cost is one keepalive (the
// session) and one watch, whatever the number of keys. A write whose answer
// was lost returns an error wrapping ErrUnknownOutcome, and the caller
// settles it by reading again.
//
// # Semaphores
//
// Session.AcquireSlot takes one of n slots of a semaphore (n at most
// MaxSlots), blocking in FIFO order; TryAcquireSlot fails at once with
// ErrLocked when every slot is held or a waiter queues:
//
//	l, err := s.AcquireSlot(ctx, "exports", "worker-1", 3) // a *SlotLock
//	defer l.Release(ctx)
//	// l.Index() is the slot, l.Token() the slot's fencing token.
//
// Slot i is the lock named SlotKey(name, i) ("name" for slot 0,
// "name/slot/<i>" otherwise, as the controller names a DistributedLock's
// slots), and a *SlotLock is that lock's *Lock with everything above:
// validity, Done, Release, guarded writes. Never more than n slot keys exist
// at once, and each slot's tokens grow across its grants; tokens of
// different slots are unrelated, so fence per slot. A slot is held until its
// key is deleted: an ex-holder whose key lingers (its lease not yet expired)
// still counts. Callers that disagree on n are refused with ErrInvalid once
// one of them sees the other's keys; the holders never exceed the largest n
// in use. semaphore.go states the rule and why it holds.
//
// # Global locks
//
// Global is the shared-etcd side of a lock that managers of several
// Kubernetes clusters contend for (docs/global.md). Per global name it keeps a
// grant key K, on its own lease, whose CreateRevision is the token, and a
// tombstone T beside it that never has a lease and is never deleted:
//
//	g, err := lease.NewGlobal(cli, "")                // keys under /lockwarden-global
//	err = g.Register(ctx, id, eng.Prefix())           // once: name, UID, election prefix
//	v, err := g.Observe(ctx, "payments")              // K and T at one revision
//	token, leaseID, err := g.Grant(ctx, "payments", req, election.IsOwner())
//
// Every call is one transaction (or one read, or one keepalive) carrying the
// caller's guard; nothing is tracked and no goroutine starts. Grant puts K and T
// in its one transaction, so T's ModRevision is the token. Wait and Grant fail
// with ErrGlobalChanged, writing nothing, when anyone granted, waited or deleted
// since the caller's basis; a failed grant revokes its new lease. The engine
// enforces the compares of the rule (R6', R7, R8) and refuses inputs that break
// it (a basis showing K held, a waiting record carrying less delay than T), but
// when to wait, grant, confirm, renew or delete is the caller's rule: safety
// rests on the caller following docs/global.md. Global tokens are revisions of
// the shared etcd, unrelated to any Engine's tokens.
//
// # Guarantees
//
// Token. A lock's grant is its lock key, or, for a blocking Acquire that
// queued, its queue entry, which becomes the grant when the lock key, the
// tombstone and every older entry are gone (owner.go states the rule); a
// release hands the lock over in its one write. The fencing token is the
// CreateRevision of the grant's key: a revision of the whole etcd cluster,
// and a lock key is created only while nobody queues, so every later grant
// of the lock, after a release, an expiry, a revoke, a ForceRelease, an etcd
// restart or a leader change, has a larger token. The exception is a rolling
// upgrade from a version before issue 24 with blocking waiters of both
// versions on one key: an old waiter creates a lock key while newer entries
// queue; a waiter that saw it takes the lock by that protocol's write
// (regrant.go), but one behind it that did not can, if the first leaves
// before that write, take its own entry with a lower token
// (docs/operations.md: stop the old replicas before starting new ones). A
// grant stays the grant until its key is deleted. Release, Update, renewals of ownership and every
// guarded write compare CreateRevision == token on the grant's key
// (Lock.Path, Lock.IsOwner) in the same transaction as their effect, so no
// operation of an ex-holder, however late it arrives, changes a newer grant
// (not even one of the same session).
//
// Validity. Lock.Valid is true only while this process can be sure that no
// one else holds the lock, given the assumptions below. The session is valid
// until S + TTL - margin, S being the time it sent its last renewal that etcd
// confirmed; etcd cannot expire the lease before S + TTL. The lock is valid
// until the earlier of that and S_own + TTL - margin, S_own being the send
// time of the last confirmed linearizable check that the key is still this
// grant (the acquire, or for a queued grant the waiter's last linearizable
// read that showed it still waiting, then one batched check per session
// every TTL/3). So
// even a lock whose key was deleted behind its back while its session lives
// on, with its watch stalled, stops being valid within TTL - margin of the
// last check; and ForceRelease keeps the next holder out for a full TTL
// counted from after its delete applied, however late the transaction
// applied: it also puts a marker on a short freshness lease granted just
// before the tombstone's, so etcd refuses it as a whole once that lease is
// gone, and the tombstone's lease outlives the freshness lease by the TTL
// (plus a second of slack for etcd's batched revokes; it is also renewed
// once after the commit). A Lock whose validity lapsed writes nothing more:
// Update refuses it.
// Valid and ValidUntil read the clock themselves (CLOCK_BOOTTIME on Linux,
// which counts suspend), so they are right even when timers fire late.
//
// Loss. When validity ends, etcd reports the lease gone, the key is seen
// deleted or replaced, or Release, Close or Orphan is called, the lock's
// Done closes, its Context is cancelled with the cause, and Valid turns
// false: once, and never back. Every goroutine the engine starts ends on its
// own when loss is detected, without Close or Release. A lock starts
// watching its key 50 ms after the acquire, from the acquire's revision, so
// a deletion in that moment is still seen, up to about that much later (a
// lock released sooner costs no watch); the watch only hastens detection.
//
// Queue. Acquire waits in FIFO order of arrival; a release wakes only the
// next waiter, whose entry is the grant from the release's revision on (it
// writes nothing to take the lock, and reads that revision's state to know);
// TryAcquire does not barge past waiters; a waiter whose own session ends
// returns at once, and the lock is never handed to a waiter etcd ended (its
// entry went with its lease). A waiter re-reads what it waits for at least
// every TTL/3, so a stalled watch delays it (and the waiters behind it) by at
// most that, never for good. A later Acquire of the same session never takes
// the place of an entry an earlier call left: it queues at the back, deleting
// that entry first even when it has become the grant (which hands the lock on).
//
// Clean-up. A failed or cancelled call leaves no key of its own behind, for
// as long as its session lives: its waiter entry, and a lock key from a
// transaction whose answer was lost, are deleted once by the call and, if
// that fails, by the session, which retries every TTL/20 until each is
// deleted or shown to be gone. Release sends its delete even when its ctx
// already ended (bounded by TTL/4); if that gets no answer, the session
// deletes the key while it is still that grant. The session deletes only
// what one of its own calls wrote (the value carries a random call ID; a
// released key: its token), guarded by the CreateRevision and ModRevision it
// read and the session's lease: never a newer grant, never a key changed
// since it looked, never a lock key it never tried to acquire (a resumed
// lease's lock keys, adopted or not: Session.Keys lists them, and they are
// the resumer's to Adopt or release), never a key a Lock of the session
// tracks (a lock key, a left queue entry that became the grant, or a
// released Lock's key whose delete was lost, adopted again: the clean-up
// holds the key's busy mark while it decides, and an acquire or adopt of the
// key waits for it). A resumed lease's waiting queue entries belong to calls that died
// with their process: ResumeSession deletes them (an entry that is its
// lock's grant is held, as a lock key is). A waiter's entry may have become
// the grant when its call fails: deleting it hands the lock on. A write
// whose answer was lost may still land after its call's clean-up: a call of
// Acquire, TryAcquire, AcquireSlot or TryAcquireSlot that lost an answer
// therefore leaves its tombstone P/gone/<call id> on its lease for the
// session's life, put before its clean-up reads (by an Acquire or AcquireSlot
// that got the lock after all, before it returns), and every write of the
// call compares it absent (Engine.callAlive), so nothing of the call appears
// later, not even after its Lock's Release (semaphore.go). A session
// that ended leaves the rest to its lease: gone with it, or, after Orphan, to
// whoever resumes it; one that expired first tries once to delete what its
// failed call left, since etcd may keep its lease, and a queued entry that is
// the grant with it, for up to its margin longer.
// Grant, the controller's call, cleans up nothing: its caller settles a lost
// answer by reading.
//
// Errors. Only a lost answer is an unknown outcome (ErrUnknownOutcome, or for
// Lock.Release and Update the context's or etcd's Unavailable error): the
// context's errors and gRPC's Unavailable, DeadlineExceeded, Canceled and
// Internal, which cover etcd's "no leader", "leader changed" and "request
// timed out". Every other etcd error (too many operations, request too
// large, permission denied, no space) is a refusal: returned as is, at once,
// never retried; except etcd's "too many requests" (it is behind on
// applying and proposed nothing), which a waiting Acquire retries; and
// etcd's "requested lease not found" on Acquire or TryAcquire, which ends the
// session (ErrSessionExpired) as its renewal loop would. Guards that cannot
// fit in one transaction with the engine's own compares are refused as
// ErrInvalid before anything is sent.
//
// # Non-guarantees
//
// Mutual exclusion in time is not guaranteed, only made likely; the token is
// what makes overlap harmless, and only where the resource checks it:
//
//   - The resource must remember the highest token it accepted and reject
//     lower ones, atomically with the write, across its own restarts, and
//     for the reads that feed a write (package fence shows how). A resource
//     that does not check tokens is not protected from an ex-holder.
//   - Pause: a process can pause (GC, SIGSTOP, a VM migration) between
//     Valid() returning true and its write. The pause may outlast validity;
//     only the token stops that write.
//   - Partition: a holder cut off from etcd keeps Valid() true until its own
//     deadline and cannot learn of anything sooner; etcd lets another holder
//     in only after the lease expires (at least TTL after the last renewal
//     etcd received), so the margin is the buffer between the two.
//   - Clocks: validity assumes this machine's clock and the etcd leader's run
//     at nearly the same rate; the margin (WithMargin; default
//     min(max(2s, TTL/50), TTL/4)) absorbs the difference. A wall-clock jump
//     changes nothing (no wall time is used); a clock running fast or slow by
//     more than the margin over one TTL breaks the validity bound, not the
//     token. Off Linux, suspend may not be counted.
//   - etcd leader change: the new leader extends every lease by a full TTL,
//     so etcd's expiry can come later than any holder expects (safe, slower
//     failover). etcd's own expiry is never used as an upper bound.
//   - etcd restore from a backup: revisions, and so tokens, go back to the
//     backup's. Restore with "etcdutl snapshot restore --bump-revision N
//     --mark-compacted" with N above any token issued since the backup, or
//     fenced resources will rightly refuse the new holders (and unfenced ones
//     will accept ex-holders).
//   - ForceRelease and an operator's "etcdctl del": ForceRelease holds the
//     next holder off for the evicted holder's TTL, beyond its validity. A
//     plain delete does not: the next holder can start while the evicted one
//     is still valid by its own clock, and only the token protects.
//   - A lost Lock whose key still exists (its validity lapsed while its
//     session lived) stays in etcd until Release or the session ends; it
//     does not delete itself, so that a controller can Adopt it again.
//   - One lease, two owners: etcd cannot tell who renews a lease. Two
//     processes (or two engines) that ResumeSession the same lease ID both
//     renew it and can both Adopt the same key, getting two valid Locks with
//     the SAME token, which no fencing can tell apart. One engine refuses a
//     second live session of a lease (ErrBusy) and one session refuses a
//     second Lock of a key (ErrBusy, HeldError); across processes nothing
//     can. Resume a lease only where something else guarantees a single
//     owner, such as an election whose compare guards every write.
//   - ForceRelease's lock-delay assumes that etcd revokes an expired lease
//     within a second of its expiry (its leader does so in batches, and
//     under a very heavy lease load it can lag more): a transaction that
//     applies in that lag is still accepted. The renewal of the tombstone's
//     lease after the commit covers such a lag whenever the answer arrives.
//     A ForceRelease whose answer was lost revokes its freshness lease and
//     reads, which settles the outcome; only if that fails too does the
//     error wrap ErrUnknownOutcome, and the lock-delay holds either way.
package lease
