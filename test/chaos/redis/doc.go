// Package redischaos is the fault suite of the Redis engine (pkg/redislock):
// workers contend for one lock on a real redis-server and write to a fenced
// resource (fence.Monotonic) with their tokens, while the suite pauses a
// holder process (SIGSTOP), delays its traffic with jitter through the
// userspace proxy, kills and restarts redis-server with and without AOF, or
// races a handoff against the waiter's end (a waiter giving up as it is
// granted, a waiter process stopped across its queue place's expiry).
// The checkers then demand: tokens granted in order, no accepted write with
// a token below one accepted before it, and no overlap of two grants'
// Valid() intervals beyond the margin, except where the package documents
// otherwise (a restart without persistence forgets keys and the token
// counter: the new holders must then be refused by the fence, and the run
// reports that refusal), and, in the handoff race, no stall of the lock
// outside the pauses. `make chaos-redis` runs it, bounded under 2 minutes.
package redischaos
