// Package redislock is lockwarden's second lock engine: distributed locks in
// Redis, each grant carrying an ordered fencing token, with validity measured
// from this client's own send times and loss delivered as a signal. It is for
// programs that have Redis and no etcd; it imports nothing from Kubernetes
// (the controller stays on etcd, package lease).
//
//	locks, err := redislock.New(rdb, redislock.Config{TTL: 15 * time.Second})
//	l, err := locks.Acquire(ctx, "payments", "worker-1") // blocks, FIFO
//	defer l.Release(ctx)
//	// act only while l.Valid(); pass l.Token() to every resource you write;
//	// stop when l.Done() closes.
//
// # Guarantees
//
// Atomic grant and token. Acquire is one Lua script: SET key value PX ttl
// of a free key and, in the same script, INCR of the lock's counter, which
// never expires: the fencing token. Renew (compare the value, then PEXPIRE)
// and Release (compare, then DEL, or hand over) are one script each. A
// release with waiters queued hands the lock over in its own script: it
// grants the first live waiter (a new INCR token, the waiter's value and
// TTL) and publishes the grant to it, so a handoff is one write; a waiter
// that gives up ends a grant made to it in the script that takes it out of
// the queue, and hands the lock on. The value carries a random
// 128-bit nonce per acquire call, so a renewal or release of an ex-holder,
// however late it arrives, never extends, creates or deletes another grant's
// key, not even one with a repeated token. A retried release after a lost
// reply is harmless: the delete leaves a tombstone for the nonce (TTL +
// margin) that names the Release call, and the retry (also go-redis's own
// resend of the script) reports success when the key is gone or the
// tombstone shows an earlier call deleted it, ErrNotHeld when it finds
// another grant's key and no tombstone. A lost acquire reply is retried
// (Acquire) or undone (TryAcquire) by nonce. A call that gives up (its reply lost, a waiter
// leaving, a grant undone) sets its nonce's tombstone (TTL + margin) in the
// same script as its delete, and the acquire script refuses a nonce with a
// tombstone: a request that was delayed, not lost, and lands after the
// clean-up grants and queues nothing. A request later than TTL + margin
// after the clean-up can still grant once, a key that nobody renews and that
// expires after TTL. An acquire that fails after its script granted (a
// WAIT that failed or was not confirmed, an unreadable reply) deletes that
// grant by nonce before it returns: an error from TryAcquire or Acquire
// leaves no key held.
//
// Validity. A Lock is valid until S + TTL - margin, S being the send time of
// its last confirmed acquire or renewal on this machine's monotonic clock
// (CLOCK_BOOTTIME on Linux, which counts suspend). The server runs the script
// after S, so it cannot expire the key before S + TTL by its own clock; the
// margin (Config.Margin, default min(max(2s, TTL/50), TTL/4)) absorbs the
// difference in rate between the two clocks. A waiter handed the lock by
// another client's release counts from the send time of its own queue
// request that the grant read (the grant names it), which came before the
// grant: never from the message's arrival, which can be late by any amount.
// Valid and ValidUntil read the clock at the call, so they are right even
// when a timer fires late. Send times are read from CLOCK_MONOTONIC plus
// the largest CLOCK_BOOTTIME offset measured so far, which is never ahead
// of CLOCK_BOOTTIME (after a suspend it lags, which only shortens a
// validity); validity checks read CLOCK_BOOTTIME itself.
//
// Loss. The Client's watchdog renews every RenewInterval (default TTL/3),
// each call with a deadline. When a renewal finds the key not ours, when no
// renewal was confirmed by the deadline, or on Release or Close, the lock's
// Done closes, its Context is cancelled with the cause and Valid turns
// false: once, and never back (a renewal reply that arrives later does not
// revive it). The deadline is kept by the watchdog even while a call hangs
// (go-redis ignores context deadlines on the socket unless
// ContextTimeoutEnabled is set). A lock that ends by its deadline deletes
// its key by nonce (one attempt, best effort), so that a renewal sent while
// it was valid and delivered late cannot keep a grant no one holds for
// another TTL: after the delete has run, that renewal finds the key gone or
// another grant's and extends nothing.
//
// Blocking calls. Release and Close return when their ctx ends, also while
// a call is stuck in go-redis on a connection without a read deadline
// (ReadTimeout -1); the stuck call is then left to go-redis, and its
// goroutine ends when that connection does. Close returns ctx.Err()
// wrapped in that case; a later Close waits for those goroutines again.
//
// Queue. Acquire waits in FIFO order; a release grants the next live
// waiter and publishes the grant on its client's channel, so only that
// waiter wakes (no retry storm) and it holds the lock without a request of
// its own; TryAcquire does not barge past waiters (it grants the head of a
// queue it finds behind a free lock); a waiter that stops refreshing its
// place for TTL is dropped. Renewals are sent as EVAL, so the first one
// after a restart, a failover or SCRIPT FLUSH costs one round trip. Guarded writes inside Redis: Lock.Eval runs a caller's Lua
// only while the key holds this grant (compared in the same script);
// Lock.Watch does the same with WATCH/MULTI/EXEC.
//
// # Non-guarantees: what Redis does not give you
//
// Mutual exclusion in time is only made likely; the token makes overlap
// harmless, and only at a resource that checks it (package fence: Monotonic,
// the SQL form). A paused holder can write after its validity ended; only
// the token stops that write.
//
//   - Persistence. Tokens survive only what Redis persistence survives. A
//     restart without persistence (or from an RDB snapshot older than the
//     last grants) forgets the counter: tokens start again from 1 (or the
//     snapshot's value) and repeat. A fenced resource then refuses the new
//     holders (safe, not live) until the counter passes its fence; raise it
//     by hand ("SET <prefix>:{k}:token N" with N above the resource's fence).
//     Run Redis with "appendonly yes" and "appendfsync always" for the token
//     counter; "everysec" can lose the last second of grants on a crash of
//     the machine (not of the process).
//   - Failover. Redis replication is asynchronous: a replica promoted before
//     it received a grant (Sentinel, Cluster) has neither the key nor the
//     counter's last increments, so a second holder can get the lock while
//     the first is valid, with a token that repeats. Config.WaitReplicas makes
//     every acquire WAIT until that many replicas have it, or release it and
//     fail with ErrNotReplicated: a promoted replica among those then has the
//     grant. It costs one more round trip to the replicas per acquire (and,
//     when a replica is down, WaitTimeout per acquire), it does not cover
//     renewals, and WAIT is not a consensus: a failover can still pick a
//     replica that did not acknowledge. On a *redis.Client (single primary,
//     Sentinel) WAIT runs after a grant, as its own command on the
//     connection that ran the script, read with WaitTimeout + 10 s; a WAIT
//     that fails or is cut by a deadline undoes the grant and fails with
//     ErrNotReplicated (a blocking Acquire's step deadline is CallTimeout +
//     WaitTimeout). A waiter handed a grant by another client's release
//     confirms it itself, with a renewal (a write after the grant) and a
//     WAIT on the renewal's connection. On a Cluster or Ring client the WAIT
//     goes in a pipeline read with the client's ReadTimeout (New requires
//     WaitTimeout below it) and, without a key, may reach another node: use
//     WAIT with a single primary or Sentinel.
//   - Server clock. Redis stores a key's expiry as an absolute Unix time and
//     compares it with the server's wall clock. A server whose clock jumps
//     forward, or runs fast by more than the margin over one TTL, can expire
//     a key while its holder is still valid by its own clock.
//   - Client pause. Valid reads the clock, but a process can pause between
//     Valid returning true and its write. Check the token at the resource.
//   - Unfenced resources. A resource that does not check tokens is not
//     protected from an ex-holder.
//
// # When to pick package lease instead
//
// Choose etcd (package lease) when a repeated token is unacceptable: etcd's
// revisions are replicated by consensus before a grant is confirmed, survive
// every restart and leader change of one cluster, and so only grow. Redis is
// the right choice when a program already depends on Redis, can run it with
// AOF, and guards every write with the token so that the rare repeat after a
// failover or an unpersisted restart ends in a refusal, not a corruption.
package redislock
