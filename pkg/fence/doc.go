// Package fence checks fencing tokens where it matters: at the resource.
//
// A lock from package lease is a lease: a paused or partitioned holder can
// go on believing it holds the lock after it expired and someone else took
// it. Timing narrows that window; only the resource can close it. Every grant
// carries a token (the lock key's etcd CreateRevision) that is larger than
// every earlier grant's, so a resource that remembers the highest token it
// has accepted and refuses lower ones cannot be written by an ex-holder once
// the new holder has written (or raised the fence) there.
//
// What this package offers, by kind of resource:
//
//   - etcd itself: Put and Txn apply a write only if the lock is still held,
//     with the lock's IsOwner() compare in the same transaction.
//   - a server you write: Monotonic is the admit check to run, under the
//     same lock as the write it admits.
//   - a question to etcd: Check says whether a token is still the current
//     grant of a lock. It is a read: by the time the answer arrives the lock
//     may have changed hands, so Check suits diagnostics and readiness, not
//     guarding a write (use the resource's own fence for that).
//
// # Writers
//
// One token can be presented by more than one process: a holder whose container restarted
// under the same grant, a write the dead process sent before it died (the kernel keeps
// sending a closed socket's buffered data; a proxy can hold a request), a copy that should
// not exist. So a resource records, beside the highest token, the writer that first
// presented it, and admits an equal token only from that writer. A writer ID names a
// process, or one term of it: "<pod UID>/<incarnation>", with an incarnation drawn at process
// start or, stricter, each time a term starts (package writer; pkg/leadership draws one for
// every term, since one process can lead a token twice when a read confirms it again after its
// deadline passed: leadership.WriterOf, Elector.Writer; lockwarden-agent's $LOCKWARDEN_WRITER,
// one per child). A writer whose
// fence raise is refused for an equal token has lost that term: it stops acting under the
// token and never presents it again (pkg/leadership's Elector.Abandon).
//
// # The SQL form
//
// A SQL resource keeps the fence (the highest token) and its writer in a row and checks both
// in the same statement or transaction as the write:
//
//	-- A write: applies only if no newer holder, and no other writer of this token, has been here.
//	UPDATE accounts SET balance = $2, fence = $t, writer = $w
//	 WHERE id = $1 AND (fence < $t OR (fence = $t AND writer = $w));
//	-- 0 rows updated: the token is stale, or another process presented it first;
//	-- stop acting as the holder.
//
// Reads that feed a write need the fence too: a read-modify-write by an ex-holder reads
// state, pauses, and writes a value computed from a stale read. Raise the fence before
// reading, in the same transaction:
//
//	BEGIN;
//	UPDATE fences SET token = $t, writer = $w
//	 WHERE name = 'payments' AND (token < $t OR (token = $t AND writer = $w));
//	-- 0 rows: stale, or another writer's token: ROLLBACK, and end the term.
//	SELECT balance FROM accounts WHERE id = $1 FOR UPDATE;
//	UPDATE accounts SET balance = $2 WHERE id = $1;
//	COMMIT;
//
// A new holder's first act should be to raise the fence at every resource it will read from,
// so that an ex-holder's later writes fail; its work starts only once that raise is admitted.
//
// The etcd form (Put, Txn) tells grants apart, not processes: its compare is the lock key's
// CreateRevision. Two processes of one session (ResumeSession then Adopt, see package lease)
// hold the same token, and a late write of the first passes. Resume a session only where a
// single owner is guaranteed, as package lease says.
//
// # What the token requires
//
// The resource must compare and record atomically with the write (one
// statement, one transaction, one lock), must keep the highest token across
// its own restarts (persist it with the data), and must see every writer's
// token (a path that writes without one is not fenced). Tokens only grow
// within one etcd lineage: after restoring etcd from a backup without
// "etcdutl snapshot restore --bump-revision", tokens can go back, and a
// fenced resource will (correctly) refuse the new holders.
package fence
