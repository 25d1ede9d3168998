--[[
  Takes a reentrant lock, or lines up for it. The lock is a hash {owner, count, fence}: the owner may take it again
  (count + 1, same fencing token); anyone else is refused. A FIFO queue of waiters may sit beside it: while it is
  non-empty nobody overtakes its head, and a free lock is handed to the head (fair mode).

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
    ARGV[5] channel for hand-off notices
    ARGV[6] lock name (carried in hand-off notices: "waiter\nfence\nleaseMs\nname")
    ARGV[7] tokens to reserve for a new hold (default 1): the holder may pass the lock on within its own process
            with the next ones, and every token issued afterwards is larger than all of them

  Output:
    {fence, count, last}  held: a new hold (count 1), a re-entry (count > 1), or a hand-off claimed by 'poll';
                          `last` is the last token reserved for the holder (= fence unless ARGV[7] > 1)
    {-1, pttl}      held by another owner (or just handed to the head of the queue); pttl: its remaining lease

  Fencing tokens are max(last + 1, server time in microseconds): strictly increasing per lock, still increasing
  when the counter is lost with a restarted Redis, and comparable with the tokens of the other lock backends.
]]
local lockKey, fenceKey, queueKey, deadlinesKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, leaseMs, mode = ARGV[1], tonumber(ARGV[2]), ARGV[3]
local waiterLeaseMs, grantChannel, name = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local reserve = tonumber(ARGV[7] or '1')

local time = redis.call('TIME')
local nowMs = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local function issueFence()
  local micros = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local fence = math.max(tonumber(redis.call('GET', fenceKey) or '0') + 1, micros)
  -- Counters of abandoned locks fade away; a lost counter restarts from the clock, above every token it issued.
  redis.call('SET', fenceKey, string.format('%.0f', fence), 'PX', 604800000)
  return fence
end

local function take(newOwner)
  local fence = issueFence()
  redis.call('HSET', lockKey, 'owner', newOwner, 'count', 1, 'fence', string.format('%.0f', fence))
  redis.call('PEXPIRE', lockKey, leaseMs)
  return fence
end

local function leaveQueue(waiter)
  redis.call('ZREM', queueKey, waiter)
  redis.call('ZREM', deadlinesKey, waiter)
end

-- Waiters that stopped polling (their process died) lose their place.
for _, late in ipairs(redis.call('ZRANGEBYSCORE', deadlinesKey, '-inf', nowMs)) do
  leaveQueue(late)
end

local holder = redis.call('HGET', lockKey, 'owner')
if holder == owner then
  if mode == 'poll' then
    -- The lock was handed to this waiter: claim it as it stands, without counting a second hold.
    if redis.call('PTTL', lockKey) < leaseMs then redis.call('PEXPIRE', lockKey, leaseMs) end
    local fence = tonumber(redis.call('HGET', lockKey, 'fence'))
    return {fence, tonumber(redis.call('HGET', lockKey, 'count')), fence}
  end
  local count = redis.call('HINCRBY', lockKey, 'count', 1)
  if redis.call('PTTL', lockKey) < leaseMs then redis.call('PEXPIRE', lockKey, leaseMs) end
  local fence = tonumber(redis.call('HGET', lockKey, 'fence'))
  return {fence, count, fence}
end

if not holder then
  local head = redis.call('ZRANGE', queueKey, 0, 0)[1]
  if not head or head == owner then
    if head then leaveQueue(head) end
    local fence = take(owner)
    if reserve > 1 then
      redis.call('SET', fenceKey, string.format('%.0f', fence + reserve - 1), 'PX', 604800000)
    end
    return {fence, 1, fence + reserve - 1}
  end
  -- Free, but someone is first in line: it is theirs.
  leaveQueue(head)
  local fence = take(head)
  redis.call('PUBLISH', grantChannel, head .. '\n' .. string.format('%.0f', fence) .. '\n' .. leaseMs .. '\n' .. name)
end

-- Tell the holder someone else wanted it: a holder passing the lock around its own process then yields on release.
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
