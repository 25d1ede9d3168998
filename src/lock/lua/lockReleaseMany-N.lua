--[[
  Drops several single holds in one call: lockRelease's fast path for each, a hold nobody else tried to take while
  it was held, with nobody queued, simply deleted (no notice: nobody waits for it).

  Input (numkeys = 2 × locks):
    KEYS[2i-1], KEYS[2i]  lock i's hash and fair queue
    ARGV[i]               lock i's owner

  Output, one number per lock:
    0    released
    -2   not the owner (expired, taken over, never held): nothing changed
    -3   contended, queued for, or held more than once: nothing changed; release it with lockRelease
]]
local answers = {}
for i = 1, #KEYS / 2 do
  local lockKey, queueKey = KEYS[2 * i - 1], KEYS[2 * i]
  local held = redis.call('HMGET', lockKey, 'owner', 'count', 'contended')
  if held[1] ~= ARGV[i] then
    answers[i] = -2
  elseif held[2] == '1' and not held[3] and redis.call('EXISTS', queueKey) == 0 then
    redis.call('DEL', lockKey)
    answers[i] = 0
  else
    answers[i] = -3
  end
end
return answers
