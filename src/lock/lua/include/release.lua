--@include take
--@include fair-queue
--[[
  Drops a hold of `owner`'s, or every hold with `all` (a waiter giving up, a shutdown; it also leaves the queue). At
  count 0 the lock goes to the fair queue's first live waiter or, with nobody queued, is deleted and a release notice
  published. `lastUsed`: the last of its reserved tokens the holder handed out (0: none reserved); the counter goes
  back to it, so the next holder's `previous` names the token that last wrote.

  Answers:
    {-2}                  lost: the caller does not hold the lock (expired, taken over, never held); nothing changed
    {count}               still held, count > 0 holds left
    {0, contended}        released; contended = 1 when another owner tried to take the lock while it was held
    {0, waiter, fence}    released and handed to `waiter` with a new fencing token; hand-off notice published
]]
local function release(keys, owner, all, lastUsed, handOffLeaseMs, releasedChannel, notice, grantedChannel)
  local lockKey, fenceKey, queueKey, deadlinesKey = keys[1], keys[2], keys[3], keys[4]
  -- The common case first, in three commands: a single hold nobody else tried to take while it was held, with nobody
  -- queued and no reserved tokens to give back, is simply deleted. Nobody waits for it, so no notice goes out.
  if not all and lastUsed == 0 then
    local held = redis.call('HMGET', lockKey, 'owner', 'count', 'contended')
    if held[1] == owner and held[2] == '1' and not held[3] and redis.call('EXISTS', queueKey) == 0 then
      redis.call('DEL', lockKey)
      return {0, 0}
    end
  end

  if all then leaveQueue(queueKey, deadlinesKey, owner) end
  if redis.call('HGET', lockKey, 'owner') ~= owner then return {-2} end
  if not all then
    local count = redis.call('HINCRBY', lockKey, 'count', -1)
    if count > 0 then return {count} end
  end
  local contended = redis.call('HGET', lockKey, 'contended') and 1 or 0
  redis.call('DEL', lockKey)
  if lastUsed > 0 then
    -- Only the owner gets here, and nobody draws tokens while it holds the lock: the counter is its last reserved one.
    redis.call('SET', fenceKey, string.format('%.0f', lastUsed), 'PX', 604800000)
  end

  dropLateWaiters(queueKey, deadlinesKey)
  local head = redis.call('ZRANGE', queueKey, 0, 0)[1]
  if not head then
    redis.call('SPUBLISH', releasedChannel, notice)
    return {0, contended}
  end
  leaveQueue(queueKey, deadlinesKey, head)
  local fence = take(lockKey, fenceKey, head, handOffLeaseMs)
  redis.call('SPUBLISH', grantedChannel, head .. '\n' .. string.format('%.0f', fence) .. '\n' .. handOffLeaseMs)
  return {0, head, fence}
end
