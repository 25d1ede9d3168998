--[[
  One attempt at each of several locks, in one call: lockAcquire's 'try' for a new owner of each.

  Input (numkeys = 3 × locks):
    KEYS[3i-2], KEYS[3i-1], KEYS[3i]  lock i's hash, fencing counter and fair queue
    ARGV[i]                           lock i's owner
    ARGV[#KEYS / 3 + 1]               lease in milliseconds

  Output, two numbers per lock:
    fence, previous   taken: a new hold (count 1); `previous` as lockAcquire's
    -1, pttl          busy: held by another owner (told someone wanted it, as lockAcquire tells it), or free with
                      fair waiters queued, which the queue's head takes when it next polls
]]
--@include take
local locks = #KEYS / 3
local leaseMs = tonumber(ARGV[locks + 1])
local answers = {}
for i = 1, locks do
  local lockKey, fenceKey, queueKey = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  if redis.call('EXISTS', lockKey, queueKey) == 0 then
    answers[2 * i - 1], answers[2 * i] = take(lockKey, fenceKey, ARGV[i], leaseMs)
  else
    local pttl = redis.call('PTTL', lockKey)
    if pttl ~= -2 then redis.call('HSET', lockKey, 'contended', 1) end
    answers[2 * i - 1], answers[2 * i] = -1, pttl
  end
end
return answers
