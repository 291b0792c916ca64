package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The semaphore's rule. A semaphore named s with n slots is n locks, one per
// slot: slot i is the lock named SlotKey(s, i) ("s" for slot 0, "s/slot/<i>"
// otherwise, the controller's layout for a DistributedLock with spec.slots),
// and its grant is that lock's key P/locks/SlotKey(s, i), on the holder's
// lease. Blocking callers queue, FIFO by CreateRevision, under
// P/semaphores/<escaped s>/<lease hex>, by If(entry absent, the call's
// tombstone absent) Then(Put(entry, WithLease(session))); an entry is never a
// grant, only a place in line. A slot is granted by one transaction, sent by
// TryAcquireSlot (nobody queues) or by the oldest waiter, which also deletes
// its own entry:
//
//	If(CreateRevision(slot key) == 0,                   the slot's lock key is absent
//	   CreateRevision(slot's tombstone) == 0,           no ForceRelease lock-delay on it
//	   CreateRevision(slot's queue prefix) == 0,        no mutex Acquire waits for that key
//	   CreateRevision(P/locks/s) <= R,                  no slot key created
//	   CreateRevision(P/locks/s/slot/ prefix) <= R,     since the read at revision R
//	   CreateRevision(P/gone/<call id>) == 0,           the call has not given up (below)
//	   waiter:  CreateRevision(own entry) == own rev,   still queued (not gone with its lease)
//	            CreateRevision(semaphore queue prefix) >= own rev   nobody older queues
//	   TryAcquireSlot: CreateRevision(semaphore queue prefix) == 0  nobody queues
//	   guards...)                                       the caller's (WithGuard)
//	Then(Put(slot key, {holder, record, slots: n}, WithLease(session)), waiter: Delete(own entry),
//	     after a lost answer: Put(P/gone/<call id>, WithLease(session)))
//
// At most n holders. A caller takes only slots 0..n-1, and each slot is a lock
// key, which the first compare lets exist once: two waiters, or a waiter and
// a TryAcquireSlot, that pick the same slot cannot both apply; the later one
// fails its compare and reads again. A slot's lock key is created only while
// the slot's tombstone and its mutex queue are absent, so by the ownership
// rule (owner.go) the lock key is the slot's one grant: the slot is held from
// that Put until the key is deleted (Release, a ForceRelease, the lease's
// expiry or revoke), however long that takes. An ex-holder whose process died
// keeps its slot until etcd expires its lease; one whose Lock lapsed while
// its session lives on keeps it until Release or the session's end. So at
// every revision at most n slot keys exist, and at most n Locks are valid at
// once under the same assumptions as the mutex's (doc.go): a Lock is valid
// only within TTL - margin of a confirmed check that its key exists, and its
// key goes only after that validity ends (a Release ends it first; etcd
// expires a lease no sooner than TTL after its last renewal), except for a
// plain etcd delete, which only the token makes harmless.
//
// Tokens. A slot's token is its lock key's CreateRevision. A slot's next key
// is created after its previous one is deleted, so at a later revision: each
// slot's tokens strictly increase across its grants (as any lock's do), and
// IsOwner, Release, Update and the session's checks compare it as for a
// mutex. Tokens of different slots are unrelated: fence each slot's resource
// (or each slot's token at a shared resource) on its own.
//
// FIFO. The oldest waiter's transaction compares that no entry older than its
// own exists, and TryAcquireSlot's that no entry exists at all, so a slot
// goes to a semaphore caller only when nobody queued before it: grants follow
// the entries' CreateRevision order, and no waiter (nor a TryAcquireSlot)
// takes a slot while an older waiter is queued. Each waiter watches only the
// entry just ahead of it; the oldest watches the key that blocks each slot
// (its lock key, tombstone or oldest mutex waiter), and re-reads at least
// every TTL/3, so a stalled watch delays the queue by at most that.
//
// Late writes. A write whose answer was lost (a deadline, a broken
// connection) may still reach etcd later, at any time while the session's
// lease lives. Every write of a call, its enqueue and its grants, compares
// the call's tombstone P/gone/<call id> absent (the call ID is random, per
// call). A call that gives up after a lost answer has its clean-up put the
// tombstone on the session's lease in the transaction that reads what the
// call may have left, before that read, and delete what the read shows: a
// late write then fails its compare, so nothing of the call appears after
// its clean-up (review 22: a late enqueue would head the queue, a late
// TryAcquireSlot grant would hold a slot no Lock tracks, each for the
// session's life). A call that gets its slot after a lost answer puts the
// tombstone with its grant, or, when it learned by a read that its lost
// grant applied and another answer was lost too, just before it returns, so
// no late write lands after its Release either. The tombstone stays until
// the session ends (a write on a lease that ended is refused): one small key
// per call that lost an answer; a call whose answers all came writes none.
// The compare only narrows when a grant applies, so the rule above holds as
// it is.
//
// Leaving the queue. A waiter whose ctx ends deletes its entry (guarded by
// its value: never another call's) before AcquireSlot returns, or, if that
// fails, its session's clean-up does, retrying every TTL/20; the waiter
// behind it then moves up. An AcquireSlot that finds an entry of its lease
// that is not its own (one an earlier call left) deletes it, guarded by its
// CreateRevision, before it queues: an entry is never a grant, and one
// AcquireSlot of a semaphore runs per session at a time. The session's
// clean-up keeps each leftover of an etcd key until it is settled, never only
// the last call's (review 22). A waiter whose session ends returns the session's
// error; its entry goes with its lease, or, if its session's validity lapsed
// before etcd expired the lease, the waiter deletes it once at once. A waiter
// whose process died without a revoke blocks the line until etcd expires its
// lease (ResumeSession deletes a resumed lease's semaphore entries at once).
//
// Slot counts. Every slot key and entry records the caller's n. A caller that
// reads a slot key or the entry ahead of it (TryAcquireSlot: the oldest
// entry) recording another n, or a slot key at an index at or above its own n,
// fails with ErrInvalid naming both counts; a grant applies only if no slot
// key was created since that read (the CreateRevision compares: a holder's
// Update keeps its n, and an UpdateRecord leaves none, so a changed key brings
// no other n; review 22), so a grant never lands next to a slot key of another
// n that its read did not see, and entries queued one behind the other share one n. Whatever the
// callers' counts, a caller with n takes only slots below n: the holders never
// exceed the largest n in use. A slot key whose value records no n (a
// DistributedLock's grant by the controller, a mutex's TryAcquire of that
// name) counts as a held slot and is no disagreement. Lock names of the form
// "s/slot/<i>" belong to the semaphore s: a semaphore name of that form is
// refused.

// MaxSlots is the largest slot count a semaphore may have (the same bound as
// a DistributedLock's spec.slots). It keeps the oldest waiter's one read of
// every slot, and its watches, small.
const MaxSlots = 16

// slotInfix separates a semaphore's name from a slot's index in its slot key.
const slotInfix = "/slot/"

// SlotKey returns the lock name of slot i of the semaphore named name: name
// itself for slot 0, so that a semaphore of one slot is the mutex of that
// name, and "name/slot/<i>" otherwise, as the controller names the etcd keys of
// a DistributedLock's slots. Its grant is the lock key Engine.Path(SlotKey(name, i)).
func SlotKey(name string, i int) string {
	if i == 0 {
		return name
	}
	return name + slotInfix + strconv.Itoa(i)
}

// slotIndex parses the rest of a lock name after "name/slot/": a slot index
// above 0 in canonical decimal form, or false.
func slotIndex(rest string) (int, bool) {
	i, err := strconv.Atoi(rest)
	if err != nil || i < 1 || strconv.Itoa(i) != rest {
		return 0, false
	}
	return i, true
}

// isSlotName reports whether name is the slot key of a slot above 0 of some
// semaphore ("x/slot/<i>").
func isSlotName(name string) bool {
	j := strings.LastIndex(name, slotInfix)
	if j <= 0 {
		return false
	}
	_, ok := slotIndex(name[j+len(slotInfix):])
	return ok
}

// semMark is the busy mark (Session.claim) of a semaphore's queue entry in
// this session: one AcquireSlot of a semaphore at a time per session, since
// the entry is one per lease. Lock names contain no control character, so
// no lock's mark is a semaphore's.
func semMark(name string) string { return "\x00semaphore\x00" + name }

// validateSemaphore checks AcquireSlot's name and n.
func validateSemaphore(name string, n int) error {
	if err := validateKey(name); err != nil {
		return fmt.Errorf("semaphore name: %w", err)
	}
	if isSlotName(name) {
		return invalidf("semaphore name %q is a slot key of another semaphore (ends in %sN)", name, slotInfix)
	}
	if n < 1 || n > MaxSlots {
		return invalidf("slot count %d is outside 1..%d", n, MaxSlots)
	}
	if err := validateKey(SlotKey(name, n-1)); err != nil {
		return fmt.Errorf("slot key: %w", err)
	}
	return nil
}

// SlotLock is one held slot of a semaphore: a Lock on the slot's lock key
// (Key is SlotKey(Semaphore, Index)), whose Token is the slot's fencing
// token, with the Lock's validity, renewal, Done, Release, Update and
// IsOwner. Tokens grow across the grants of one slot, not across slots.
type SlotLock struct {
	*Lock
	semaphore string
	index     int
	slots     int
}

// Semaphore returns the semaphore's name.
func (l *SlotLock) Semaphore() string { return l.semaphore }

// Index returns the slot's index, 0 to Slots()-1.
func (l *SlotLock) Index() int { return l.index }

// Slots returns the semaphore's slot count the slot was acquired with.
func (l *SlotLock) Slots() int { return l.slots }

// AcquireSlot takes a free slot of the semaphore named name, of n slots
// (1..MaxSlots), for holder, waiting as long as ctx allows; callers wait in
// FIFO order, and never more than n hold a slot at once (semaphore.go states
// the rule). It takes the lowest free slot. Without waiters and with a slot
// free it costs one read and one write; otherwise it queues (one write), and
// the slot's grant is one more write, which also leaves the queue.
//
// A waiter ends with its session (AcquireSlot returns the session's error) or
// its ctx; either way its queue entry is deleted, by the call or then by the
// session (see Session). One session may hold several slots of a semaphore,
// but runs one AcquireSlot of a semaphore at a time: a second call while one
// waits fails with ErrBusy. A call whose n differs from the one recorded by a
// slot it reads, or by the entry ahead of it, fails with ErrInvalid. Options:
// WithRecord is stored with the slot; WithGuard compares go into the grant's
// transaction (ErrGuardFailed when they fail; the call then leaves the queue).
// Errors from etcd are treated as for Acquire: lost answers and "too many
// requests" are retried, every other refusal is returned at once.
func (s *Session) AcquireSlot(ctx context.Context, name, holder string, n int, opts ...LockOption) (*SlotLock, error) {
	l, err := s.acquireSlot(ctx, name, holder, n, opts, true)
	if err != nil {
		s.leaseGone(err)
		if serr := s.Err(); serr != nil && ctx.Err() == nil && !errors.Is(err, serr) {
			err = fmt.Errorf("%w (%w)", serr, err)
		}
		return nil, fmt.Errorf("acquire slot of %s: %w", name, err)
	}
	return l, nil
}

// TryAcquireSlot takes a free slot of the semaphore named name, of n slots,
// for holder, or fails at once: with an error wrapping ErrLocked when every
// slot is held (or in a lock-delay) or a waiter queues (it does not barge
// past waiters), with ErrInvalid on a slot count that disagrees (as
// AcquireSlot). If the grant's answer was lost the error wraps
// ErrUnknownOutcome, and the session deletes a slot key it may have created.
func (s *Session) TryAcquireSlot(ctx context.Context, name, holder string, n int, opts ...LockOption) (*SlotLock, error) {
	l, err := s.acquireSlot(ctx, name, holder, n, opts, false)
	if err != nil {
		if s.leaseGone(err) {
			err = fmt.Errorf("%w (%w)", s.Err(), err)
		}
		return nil, fmt.Errorf("try acquire slot of %s: %w", name, err)
	}
	return l, nil
}
