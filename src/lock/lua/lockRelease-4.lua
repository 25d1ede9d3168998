--[[
  Drops a hold of a reentrant lock. At count 0 the lock goes to the first live waiter of the fair queue or, with
  nobody queued, is deleted and a release notice published. Only the owner can do either.

  Input:
    KEYS[1] lock hash
    KEYS[2] fencing counter
    KEYS[3] queue: sorted set, waiter -> arrival order
    KEYS[4] queue deadlines: sorted set, waiter -> epoch ms by which it must poll again
    ARGV[1] owner
    ARGV[2] lease in milliseconds for the waiter it is handed to
    ARGV[3] channel for the release notice
    ARGV[4] release notice payload
    ARGV[5] channel for hand-off notices ("owner\nfence\nleaseMs")
    ARGV[6] '0': drop one hold; '1': leave the queue and drop every hold (a waiter giving up, a shutdown)
    ARGV[7] the last token the holder handed out of those it reserved (0: not known). The counter goes back to it:
            the rest were never used, and the next holder's `previous` then names the token that last wrote

  Output:
    {-2}                  not the owner (expired, taken over, never held): nothing changed
    {count}               still held, count > 0 holds left
    {0, contended}        released; release notice published. contended = 1 when another owner tried to take the
                          lock while it was held
    {0, waiter, fence}    released and handed to `waiter` with a new fencing token; hand-off notice published
]]
--@include issue-fence
local lockKey, fenceKey, queueKey, deadlinesKey = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local owner, leaseMs, all = ARGV[1], tonumber(ARGV[2]), ARGV[6] == '1'

local function leaveQueue(waiter)
  redis.call('ZREM', queueKey, waiter)
  redis.call('ZREM', deadlinesKey, waiter)
end

-- The common case first, in three commands: a single hold nobody else tried to take while it was held, with nobody
-- queued and no reserved tokens to give back, is simply deleted. Nobody waits for it, so no notice goes out.
if not all and tonumber(ARGV[7] or '0') == 0 then
  local held = redis.call('HMGET', lockKey, 'owner', 'count', 'contended')
  if held[1] == owner and held[2] == '1' and not held[3] and redis.call('EXISTS', queueKey) == 0 then
    redis.call('DEL', lockKey)
    return {0, 0}
  end
end

if all then leaveQueue(owner) end
if redis.call('HGET', lockKey, 'owner') ~= owner then
  return {-2}
end
if not all then
  local count = redis.call('HINCRBY', lockKey, 'count', -1)
  if count > 0 then return {count} end
end
local contended = redis.call('HGET', lockKey, 'contended') and 1 or 0
redis.call('DEL', lockKey)
local lastUsed = tonumber(ARGV[7] or '0')
if lastUsed > 0 then
  -- Only the owner gets here, and nobody draws tokens while it holds the lock: the counter is its last reserved one.
  redis.call('SET', fenceKey, string.format('%.0f', lastUsed), 'PX', 604800000)
end

local time = redis.call('TIME')
local nowMs = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
for _, late in ipairs(redis.call('ZRANGEBYSCORE', deadlinesKey, '-inf', nowMs)) do
  leaveQueue(late)
end

local head = redis.call('ZRANGE', queueKey, 0, 0)[1]
if not head then
  redis.call('SPUBLISH', ARGV[3], ARGV[4])
  return {0, contended}
end
leaveQueue(head)
local fence = issueFence(fenceKey)
local fenceText = string.format('%.0f', fence)
redis.call('HSET', lockKey, 'owner', head, 'count', 1, 'fence', fenceText)
redis.call('PEXPIRE', lockKey, leaseMs)
redis.call('SPUBLISH', ARGV[5], head .. '\n' .. fenceText .. '\n' .. ARGV[2])
return {0, head, fence}
