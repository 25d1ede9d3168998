--[[
  Takes a segment lock without waiting and issues its fencing token.

  Input:
    KEYS[1] lock key
    KEYS[2] fencing counter key
    ARGV[1] owner token (random per acquisition)
    ARGV[2] lease in milliseconds

  Output:
    > 0  acquired: the fencing token, strictly greater than every token issued before for this segment
     -1  held by another owner

  A counter that is missing (first use, or a Redis that restarted empty) is seeded from the server clock in
  microseconds, so tokens keep rising across such restarts: a writer fenced before the restart stays fenced, and a
  new holder is never refused because Postgres remembers an older, larger token.
]]
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return -1
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  local now = redis.call('TIME')
  redis.call('SET', KEYS[2], string.format('%.0f', now[1] * 1000000 + now[2]))
end
local token = redis.call('INCR', KEYS[2])
-- Counters of abandoned layouts fade away; a reseeded counter is still larger than any token it ever issued.
redis.call('PEXPIRE', KEYS[2], 604800000)
return token
