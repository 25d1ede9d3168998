--[[
  The fair queue beside a lock: a sorted set of waiters in arrival order, and one of the time (epoch ms) by which each
  must poll again or lose its place.
]]
local function leaveQueue(queueKey, deadlinesKey, waiter)
  redis.call('ZREM', queueKey, waiter)
  redis.call('ZREM', deadlinesKey, waiter)
end

-- Waiters that stopped polling (their process died) lose their place. Returns the server's time in ms.
local function dropLateWaiters(queueKey, deadlinesKey)
  local time = redis.call('TIME')
  local nowMs = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  for _, late in ipairs(redis.call('ZRANGEBYSCORE', deadlinesKey, '-inf', nowMs)) do
    leaveQueue(queueKey, deadlinesKey, late)
  end
  return nowMs
end
