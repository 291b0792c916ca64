package redislock

import "github.com/redis/go-redis/v9"

// The scripts compare the nonce (the first 32 characters of the value) in
// the same script as their effect: no get-then-act from the client. Waiter
// liveness keys are named from ARGV but share the lock's hash slot.

// luaQueue holds the queue's functions. Waiter IDs are "<client ID>/<n>";
// wk is the liveness key prefix, ch the wake channel prefix.
//
// A waiter's liveness key (PX its TTL, refreshed by each of its queue
// requests) holds its grant request, "<nonce> <ask> <ttl ms> <holder>":
// ask numbers the queue request that wrote it, so that a waiter granted by
// someone else's script knows which of its requests the grant saw, and
// counts its validity from that request's send time, which came before the
// grant (see grant.go).
//
// grant hands a free lock to the first live waiter, in the script that
// freed it or found it free: it draws the next token (INCR, the same
// counter as every grant), sets the lock key to the waiter's value with the
// waiter's TTL, takes the waiter out of the queue, and publishes "<id>
// <ask> <value>" on the waiter's channel, unless the waiter is me (the
// caller, who learns it from the reply). Dead waiters (liveness expired) at
// the head are dropped. A live head whose liveness key holds no grant
// request (a client that only asks to be woken, or anything else that does
// not parse, such as a TTL of 0 that SET PX would refuse halfway through
// the script) is put back at the head and woken instead, and the lock
// stays free. Returns the granted waiter's ID and the value, or false and
// the woken waiter's ID, or false when no live waiter is queued.
//
// enqueue joins the waiter at the tail, or refreshes its place while its
// liveness key lives. A waiter whose key expired may still be in the list
// (dead entries are dropped only at the head): it is taken out first,
// except on its first request (first), which no earlier request of its ID
// can have queued.
const luaQueue = `
local function grant(lk, tk, q, wk, ch, me)
  local h = redis.call('LPOP', q)
  while h do
    local w = redis.call('GET', wk .. h)
    if w then
      local n, a, ttl, holder = string.match(w, '^(%x+) (%d+) ([1-9]%d*) (.*)$')
      if not n then
        redis.call('LPUSH', q, h)
        redis.call('PUBLISH', ch .. string.match(h, '^([^/]+)/'), h)
        return false, h
      end
      redis.call('DEL', wk .. h)
      local v = n .. ' ' .. redis.call('INCR', tk) .. ' ' .. holder
      redis.call('SET', lk, v, 'PX', ttl)
      if h ~= me then
        redis.call('PUBLISH', ch .. string.match(h, '^([^/]+)/'), h .. ' ' .. a .. ' ' .. v)
      end
      return h, v
    end
    h = redis.call('LPOP', q)
  end
  return false
end
local function enqueue(q, wk, id, ttl, req, first)
  if redis.call('EXISTS', wk .. id) == 0 then
    if not first then redis.call('LREM', q, 0, id) end
    redis.call('RPUSH', q, id)
  end
  redis.call('SET', wk .. id, req, 'PX', ttl)
end
`

// acquireScript: KEYS lock, token, queue; ARGV nonce, holder, ttl ms,
// waiter ID ("" for TryAcquire: never queue), liveness prefix, this nonce's
// tombstone key, the request's ask number, wake channel prefix, confirm
// ("1" with WaitReplicas, else "0"). Returns {3, ”, 0} if the tombstone is
// set (the call has ended: grant nothing, queue nothing), {1, value, pttl}
// granted (also for a retry of this nonce's own grant whose reply was
// lost, or a waiter that finds the grant a release handed it), {0, value,
// pttl} held by another (also by the waiter this script just granted), {2,
// head, pttl} free but a waiter that asks to be woken is ahead.
//
// A grant found by its nonce (granted earlier) was written by an earlier
// request or by another client's release, maybe on another connection.
// With confirm the script extends it (PEXPIRE ttl, this grant's own key: a
// renewal), so that the WAIT that follows on this connection covers a
// write after the grant in the replication stream. Without that write the
// WAIT would follow a read only: Redis 7.0 then waits for the server's
// whole replication offset (measured on 7.0.15), but a server that counts
// only the connection's own writes would confirm at once, and a grant
// that no replica has would be taken as replicated.
//
// The uncontended path is four commands, each guarding something: MGET of
// the lock and this nonce's tombstone (mutual exclusion, a retry that
// recognises its own grant instead of drawing a second token, and a
// delayed request of a call that ended, which grants and queues nothing),
// LINDEX of the queue (FIFO: no barging past a queued waiter), INCR (the
// fencing token), SET PX (the grant, with its expiry).
var acquireScript = redis.NewScript(luaQueue + `
local m = redis.call('MGET', KEYS[1], ARGV[6])
if m[2] then return {3, '', 0} end
local v = m[1]
local req = ARGV[1] .. ' ' .. (ARGV[7] or '0') .. ' ' .. ARGV[3] .. ' ' .. ARGV[2]
local first = ARGV[7] == '1'
if v then
  if string.sub(v, 1, 32) == ARGV[1] then
    if ARGV[9] == '1' then
      redis.call('PEXPIRE', KEYS[1], ARGV[3])
      return {1, v, tonumber(ARGV[3])}
    end
    return {1, v, redis.call('PTTL', KEYS[1])}
  end
  if ARGV[4] ~= '' then enqueue(KEYS[3], ARGV[5], ARGV[4], ARGV[3], req, first) end
  return {0, v, redis.call('PTTL', KEYS[1])}
end
if redis.call('LINDEX', KEYS[3], 0) then
  if ARGV[4] ~= '' then enqueue(KEYS[3], ARGV[5], ARGV[4], ARGV[3], req, first) end
  local g, gv = grant(KEYS[1], KEYS[2], KEYS[3], ARGV[5], ARGV[8], ARGV[4])
  if g and g == ARGV[4] then return {1, gv, tonumber(ARGV[3])} end
  if g then return {0, gv, redis.call('PTTL', KEYS[1])} end
  if gv then return {2, gv, redis.call('PTTL', ARGV[5] .. gv)} end
end
local nv = ARGV[1] .. ' ' .. redis.call('INCR', KEYS[2]) .. ' ' .. ARGV[2]
redis.call('SET', KEYS[1], nv, 'PX', ARGV[3])
return {1, nv, tonumber(ARGV[3])}
`)

// renewScript: KEYS lock; ARGV nonce, ttl ms. Extends the key only if its
// value is this grant's; never creates a key. Returns 1 or 0. It is sent
// as EVAL (renew.go): its body is short, and the first renewal after a
// restart, a failover or SCRIPT FLUSH then costs one round trip, not
// EVALSHA, NOSCRIPT and EVAL.
var renewScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 32) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// releaseScript: KEYS lock, queue, token; ARGV nonce, liveness prefix,
// channel prefix, this nonce's tombstone key, its PX in ms, mark ("r<n>"
// for the n-th Release call of this Lock). Only if the key's value is this
// grant's: it leaves the tombstone (value mark) and hands the lock to the
// next live waiter in the same script (grant), or deletes the key when no
// waiter is queued. Returns releaseDeleted, releaseThisCall (no longer
// ours, and this Release call ended it: its mark is the tombstone's),
// releaseEarlier (no longer ours, and another Release call of this grant
// ended it), releaseAbsent (no key) or releaseOthers (another grant's key,
// left alone).
//
// The uncontended path is four commands: GET (only this grant's key is
// ended), SET of the tombstone (a retry after a lost reply can tell that it
// was this Release that ended the grant, also once the next holder has the
// key; go-redis resends a script whose connection broke inside one call,
// and the mark tells that resend its own call's effect), LPOP of the queue
// (the handoff: nil when no waiter is queued), DEL.
var releaseScript = redis.NewScript(luaQueue + `
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 32) == ARGV[1] then
  redis.call('SET', ARGV[4], ARGV[6], 'PX', ARGV[5])
  if not grant(KEYS[1], KEYS[3], KEYS[2], ARGV[2], ARGV[3], '') then
    redis.call('DEL', KEYS[1])
  end
  return 1
end
local t = redis.call('GET', ARGV[4])
if t == ARGV[6] then return 3 end
if t and string.sub(t, 1, 1) == 'r' then return 2 end
if not v then return 0 end
return -1
`)

// Replies of the release script.
const (
	releaseOthers   = -1 // the key is another grant's
	releaseAbsent   = 0  // no key
	releaseDeleted  = 1  // this grant's key, ended now (deleted or handed over)
	releaseEarlier  = 2  // ended by another Release call of this grant (its tombstone says so)
	releaseThisCall = 3  // ended by an earlier attempt of this Release call (its mark is the tombstone's)
)

// markReleased starts the tombstone's value when Lock.Release ended the
// key ("r<n>", n numbering the Lock's Release calls); the drop script
// writes "d" (a clean-up: expiry, an undone or abandoned acquire) unless a
// Release's mark is there.
const markReleased = "r"

// dropScript: KEYS lock, queue, token; ARGV nonce, waiter ID ("" for
// none), liveness prefix, channel prefix, this nonce's tombstone key, its
// PX in ms. Ends an acquire call that gives up: sets the tombstone (keeping
// a Release's mark), takes the waiter out of the queue, ends the lock's key
// only if its value is this nonce's (a grant made to this call, by its own
// unanswered request or by another's release racing its exit), and, if the
// lock is then free, hands it to the next live waiter (grant). Returns 1 if
// it ended this nonce's key, else 0.
var dropScript = redis.NewScript(luaQueue + `
if string.sub(redis.call('GET', ARGV[5]) or '', 1, 1) ~= 'r' then
  redis.call('SET', ARGV[5], 'd', 'PX', ARGV[6])
end
if ARGV[2] ~= '' then
  redis.call('LREM', KEYS[2], 0, ARGV[2])
  redis.call('DEL', ARGV[3] .. ARGV[2])
end
local v = redis.call('GET', KEYS[1])
local mine = v and string.sub(v, 1, 32) == ARGV[1]
if mine or not v then
  if not grant(KEYS[1], KEYS[3], KEYS[2], ARGV[3], ARGV[4], '') and mine then
    redis.call('DEL', KEYS[1])
  end
end
if mine then return 1 end
return 0
`)

// guardPrologue runs before a caller's script in Lock.Eval: the last KEY is
// the lock key and the last ARGV the nonce, both removed before the caller's
// code runs, so the caller sees KEYS and ARGV as it passed them.
const guardPrologue = `
local __lk = table.remove(KEYS)
local __n = table.remove(ARGV)
local __v = redis.call('GET', __lk)
if not __v or string.sub(__v, 1, 32) ~= __n then
  return redis.error_reply('LOCKWARDEN_NOT_HELD lock not held by this grant')
end
return (function()
`

const guardEpilogue = `
end)()
`
