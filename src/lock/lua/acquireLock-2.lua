--[[
  Takes a segment lock without waiting and issues its fencing token.

  Input:
    KEYS[1] lock key
    KEYS[2] fencing counter key
    ARGV[1] owner token (random per acquisition)
    ARGV[2] lease in milliseconds

  Output:
    {token, previous}  acquired: the fencing token, strictly greater than every token issued before for this
                       segment, and the token issued just before it (0 if none is remembered): when `previous` is
                       the caller's own last token, nobody else held the lock in between
    -1                 held by another owner

  Tokens are max(last + 1, server time in microseconds). A counter that is missing (first use, or a Redis that
  restarted empty) thus restarts from the clock, so tokens keep rising across such restarts: a writer fenced before
  the restart stays fenced, and a new holder is never refused because Postgres remembers an older, larger token. The
  clock floor also keeps them above tokens another lock backend (LOCK_BACKEND) wrote meanwhile, whose tokens follow
  the same clock.
]]
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return -1
end
local now = redis.call('TIME')
local micros = tonumber(now[1]) * 1000000 + tonumber(now[2])
local previous = tonumber(redis.call('GET', KEYS[2]) or '0')
local token = math.max(previous + 1, micros)
-- Counters of abandoned layouts fade away; a counter that comes back restarts above every token it issued.
redis.call('SET', KEYS[2], string.format('%.0f', token), 'PX', 604800000)
return {token, previous}
