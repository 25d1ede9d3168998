--[[
  Takes a reentrant lock (its owner again: count + 1, same token), or lines up for it. While a fair queue of waiters
  sits beside it, nobody overtakes its head, and a free lock goes to the head.

  Input:
    KEYS[1] lock hash
    KEYS[2] fencing counter
    KEYS[3] queue: sorted set, waiter -> arrival order
    KEYS[4] queue deadlines: sorted set, waiter -> epoch ms by which it must poll again or lose its place
    ARGV[1] owner
    ARGV[2] lease in milliseconds
    ARGV[3] mode: 'try' (one attempt), 'queue' (attempt, then join the queue), 'poll' (a queued waiter: claim the
            lock if it was handed over, else keep the place in line)
    ARGV[4] waiter lease in milliseconds
    ARGV[5] channel for hand-off notices ("owner\nfence\nleaseMs")
    ARGV[6] tokens to reserve with a new hold (default 1), for hand-offs within the holder's process

  Output:
    {fence, count, previous, last}  held: a new hold (count 1), a re-entry or a claimed hand-off; `previous`: the
                                    token issued just before (0: unknown), `last`: the last token reserved
    {-1, pttl}                      busy: held by another owner, or handed to the queue's head; pttl: the lease left
]]
--@include take
--@include fair-queue
local lockKey, fenceKey, queueKey, deadlinesKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, leaseMs, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local waiterLeaseMs, grantedChannel = tonumber(ARGV[4]), ARGV[5]
local reserve = tonumber(ARGV[6] or '1')

-- The caller's new hold, with the tokens it reserves: the answer of both paths that take a free lock.
local function newHold()
  local fence, previous = take(lockKey, fenceKey, owner, leaseMs)
  if reserve > 1 then
    redis.call('SET', fenceKey, string.format('%.0f', fence + reserve - 1), 'PX', 604800000)
  end
  return {fence, 1, previous, fence + reserve - 1}
end

-- The common case first, in five commands: one attempt at a lock that is free with nobody queued is a new hold.
if mode == 'try' and redis.call('EXISTS', lockKey, queueKey) == 0 then
  return newHold()
end

local nowMs = dropLateWaiters(queueKey, deadlinesKey)
local holder = redis.call('HGET', lockKey, 'owner')
if holder == owner then
  -- A hand-off claimed by 'poll' is the hold itself; anything else re-enters.
  local count = tonumber(redis.call('HGET', lockKey, 'count'))
  if mode ~= 'poll' then count = redis.call('HINCRBY', lockKey, 'count', 1) end
  if redis.call('PTTL', lockKey) < leaseMs then redis.call('PEXPIRE', lockKey, leaseMs) end
  local fence = tonumber(redis.call('HGET', lockKey, 'fence'))
  return {fence, count, 0, fence}
end

if not holder then
  local head = redis.call('ZRANGE', queueKey, 0, 0)[1]
  if not head or head == owner then
    if head then leaveQueue(queueKey, deadlinesKey, head) end
    return newHold()
  end
  -- Free, but someone is first in line: it is theirs.
  leaveQueue(queueKey, deadlinesKey, head)
  local fence = take(lockKey, fenceKey, head, leaseMs)
  redis.call('SPUBLISH', grantedChannel, head .. '\n' .. string.format('%.0f', fence) .. '\n' .. leaseMs)
end

-- Tell the holder someone else wanted it: its release then announces itself, and a holder passing the lock around
-- its own process yields.
if holder then redis.call('HSET', lockKey, 'contended', 1) end

if mode ~= 'try' then
  if not redis.call('ZSCORE', queueKey, owner) then
    local tail = redis.call('ZRANGE', queueKey, -1, -1, 'WITHSCORES')
    local position = 1
    if tail[2] then position = tonumber(tail[2]) + 1 end
    redis.call('ZADD', queueKey, position, owner)
  end
  redis.call('ZADD', deadlinesKey, nowMs + waiterLeaseMs, owner)
  redis.call('PEXPIRE', queueKey, waiterLeaseMs * 2)
  redis.call('PEXPIRE', deadlinesKey, waiterLeaseMs * 2)
end
return {-1, redis.call('PTTL', lockKey)}
