package redislock

import "github.com/redis/go-redis/v9"

// The scripts compare the nonce (the first 32 characters of the value) in
// the same script as their effect: no get-then-act from the client. Waiter
// liveness keys are named from ARGV but share the lock's hash slot.

// luaWake drops dead waiters at the head of the queue (KEYS[2]) and, if
// wake is true, publishes the live head's ID on its client's channel.
// Waiter IDs are "<client ID>/<sequence>"; ARGV[wk] is the liveness key
// prefix, ARGV[ch] the channel prefix.
const luaHead = `
local function head(q, wk)
  local h = redis.call('LINDEX', q, 0)
  while h and redis.call('EXISTS', wk .. h) == 0 do
    redis.call('LPOP', q)
    h = redis.call('LINDEX', q, 0)
  end
  return h
end
local function wake(q, wk, ch)
  local h = head(q, wk)
  if h then
    redis.call('PUBLISH', ch .. string.match(h, '^([^/]+)/'), h)
  end
end
local function enqueue(q, wk, id, ttl)
  if redis.call('EXISTS', wk .. id) == 0 then
    redis.call('LREM', q, 0, id)
    redis.call('RPUSH', q, id)
  end
  redis.call('SET', wk .. id, '1', 'PX', ttl)
end
`

// acquireScript: KEYS lock, token, queue; ARGV nonce, holder, ttl ms,
// waiter ID ("" for TryAcquire: never queue), liveness prefix, this nonce's
// tombstone key. Returns {3, ”, 0} if the tombstone is set (the call has
// ended: grant nothing, queue nothing), {1, value, pttl} granted (also for a
// retry of this nonce's own grant whose reply was lost), {0, value, pttl}
// held by another, {2, head, pttl} free but a waiter is ahead.
var acquireScript = redis.NewScript(luaHead + `
if redis.call('EXISTS', ARGV[6]) == 1 then return {3, '', 0} end
local v = redis.call('GET', KEYS[1])
if v then
  if string.sub(v, 1, 32) == ARGV[1] then
    return {1, v, redis.call('PTTL', KEYS[1])}
  end
  if ARGV[4] ~= '' then enqueue(KEYS[3], ARGV[5], ARGV[4], ARGV[3]) end
  return {0, v, redis.call('PTTL', KEYS[1])}
end
local h = head(KEYS[3], ARGV[5])
if h and h ~= ARGV[4] then
  if ARGV[4] ~= '' then enqueue(KEYS[3], ARGV[5], ARGV[4], ARGV[3]) end
  return {2, h, redis.call('PTTL', ARGV[5] .. h)}
end
if h then
  redis.call('LPOP', KEYS[3])
  redis.call('DEL', ARGV[5] .. h)
end
local t = redis.call('INCR', KEYS[2])
local nv = ARGV[1] .. ' ' .. t .. ' ' .. ARGV[2]
redis.call('SET', KEYS[1], nv, 'NX', 'PX', ARGV[3])
return {1, nv, tonumber(ARGV[3])}
`)

// renewScript: KEYS lock; ARGV nonce, ttl ms. Extends the key only if its
// value is this grant's; never creates a key. Returns 1 or 0.
var renewScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 32) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// releaseScript: KEYS lock, queue; ARGV nonce, liveness prefix, channel
// prefix, this nonce's tombstone key, its PX in ms, mark ("r" for Release,
// "d" for a clean-up delete). Deletes the key only if its value is this
// grant's, leaves the tombstone (value mark) and wakes the next live waiter.
// Returns releaseDeleted, releaseEarlier (no longer ours, and a Release of
// this nonce deleted it), releaseAbsent (no key) or releaseOthers (another
// grant's key, left alone).
var releaseScript = redis.NewScript(luaHead + `
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 32) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('SET', ARGV[4], ARGV[6], 'PX', ARGV[5])
  wake(KEYS[2], ARGV[2], ARGV[3])
  return 1
end
if redis.call('GET', ARGV[4]) == 'r' then return 2 end
if not v then return 0 end
return -1
`)

// Replies of the release script.
const (
	releaseOthers  = -1 // the key is another grant's
	releaseAbsent  = 0  // no key
	releaseDeleted = 1  // this grant's key, deleted now
	releaseEarlier = 2  // deleted by an earlier Release of this grant (its tombstone says so)
)

// markReleased is the tombstone's value when Lock.Release deleted the key;
// the drop script writes "d" (a clean-up: expiry, an undone or abandoned
// acquire) unless a Release's mark is there.
const markReleased = "r"

// dropScript: KEYS lock, queue; ARGV nonce, waiter ID ("" for none),
// liveness prefix, channel prefix, this nonce's tombstone key, its PX in ms.
// Ends an acquire call that gives up: sets the tombstone (keeping a
// Release's mark), takes the waiter out of the queue, deletes the key only
// if its value is this nonce's, and wakes the next live waiter if the lock
// is free. Returns 1 if it deleted the key, else 0.
var dropScript = redis.NewScript(luaHead + `
if redis.call('GET', ARGV[5]) ~= 'r' then
  redis.call('SET', ARGV[5], 'd', 'PX', ARGV[6])
end
if ARGV[2] ~= '' then
  redis.call('LREM', KEYS[2], 0, ARGV[2])
  redis.call('DEL', ARGV[3] .. ARGV[2])
end
local r = 0
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 32) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  r = 1
end
if redis.call('EXISTS', KEYS[1]) == 0 then wake(KEYS[2], ARGV[3], ARGV[4]) end
return r
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
