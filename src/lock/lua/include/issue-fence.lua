--[[
  Issues the next fencing token of the lock whose counter is `fenceKey`: max(last + 1, server time in µs).

  Tokens thus rise strictly per lock, keep rising when the counter is lost with a Redis that restarted empty (the
  clock floor is above every token issued before), and stay comparable with the other lock backends' tokens, which
  follow the same clock. Returns the token and the one issued just before it (0 if none is remembered).
]]
local function issueFence(fenceKey)
  local time = redis.call('TIME')
  local micros = tonumber(time[1]) * 1000000 + tonumber(time[2])
  -- Counters of abandoned locks fade away after a week; one that comes back restarts from the clock.
  local previous = tonumber(redis.call('SET', fenceKey, string.format('%.0f', micros), 'PX', 604800000, 'GET') or '0')
  if previous < micros then return micros, previous end
  -- The counter is ahead of the clock (tokens reserved ahead, or the clock stepped back): count on from it.
  redis.call('SET', fenceKey, string.format('%.0f', previous + 1), 'PX', 604800000)
  return previous + 1, previous
end
