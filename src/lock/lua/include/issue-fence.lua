--[[
  Issues the next fencing token of the lock whose counter is `fenceKey`: max(last + 1, server time in µs).

  Tokens thus rise strictly per lock, keep rising when the counter is lost with a Redis that restarted empty (the
  clock floor is above every token issued before), and stay comparable with the other lock backends' tokens, which
  follow the same clock. Returns the token and the one issued just before it (0 if none is remembered).
]]
local function issueFence(fenceKey)
  local time = redis.call('TIME')
  local micros = tonumber(time[1]) * 1000000 + tonumber(time[2])
  local previous = tonumber(redis.call('GET', fenceKey) or '0')
  local fence = math.max(previous + 1, micros)
  -- Counters of abandoned locks fade away after a week; one that comes back restarts from the clock.
  redis.call('SET', fenceKey, string.format('%.0f', fence), 'PX', 604800000)
  return fence, previous
end
