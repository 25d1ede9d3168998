--[[
  Takes several held locks again, each by its own holder, in one call: a release and the next acquisition as one step,
  with no moment in between for another caller. Only a single hold nobody else tried to take, with nobody queued, is
  taken again (a new token, a fresh lease); any other is left as it is, for the caller to release.

  Input (numkeys = 3 × locks):
    KEYS[3i-2], KEYS[3i-1], KEYS[3i]  lock i's hash, fencing counter and fair queue
    ARGV[i]                           lock i's owner
    ARGV[#KEYS / 3 + 1]               lease in milliseconds

  Output, two numbers per lock:
    fence, previous   taken again: the new token, and the one issued just before it (the holder's own)
    -1, 0             busy: another owner tried to take it, or waits in its queue, or the holder holds it more than
                      once; nothing changed
    -2, 0             lost: not the owner (expired, taken over, never held); nothing changed
]]
--@include take
local locks = #KEYS / 3
local leaseMs = tonumber(ARGV[locks + 1])
local answers = {}
for i = 1, locks do
  local lockKey, fenceKey, queueKey = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local held = redis.call('HMGET', lockKey, 'owner', 'count', 'contended')
  if held[1] ~= ARGV[i] then
    answers[2 * i - 1], answers[2 * i] = -2, 0
  elseif held[2] == '1' and not held[3] and redis.call('EXISTS', queueKey) == 0 then
    answers[2 * i - 1], answers[2 * i] = take(lockKey, fenceKey, ARGV[i], leaseMs)
  else
    answers[2 * i - 1], answers[2 * i] = -1, 0
  end
end
return answers
