--[[
  One attempt at each of several locks, in one call: the fast path of lockAcquire's 'try' for each. For a batch that
  takes many locks at once (the order flow's segments on one Redis), one script call instead of one per lock.

  Input (numkeys = 3 × locks):
    KEYS[3i-2], KEYS[3i-1], KEYS[3i]  lock i's hash, fencing counter and fair queue
    ARGV[i]                           lock i's owner
    ARGV[#KEYS / 3 + 1]               lease in milliseconds

  Output, two numbers per lock:
    fence, previous   taken: a new hold (count 1); `previous` as lockAcquire's
    -1, pttl          held by another owner (marked contended, as lockAcquire marks it)
    -3, 0             free but with fair waiters queued: ask lockAcquire, which hands it to the head of the queue
]]
--@include issue-fence
local locks = #KEYS / 3
local leaseMs = tonumber(ARGV[locks + 1])
local answers = {}
for i = 1, locks do
  local lockKey, fenceKey, queueKey = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local owner = ARGV[i]
  if redis.call('EXISTS', lockKey, queueKey) == 0 then
    local fence, previous = issueFence(fenceKey)
    redis.call('HSET', lockKey, 'owner', owner, 'count', 1, 'fence', string.format('%.0f', fence))
    redis.call('PEXPIRE', lockKey, leaseMs)
    answers[2 * i - 1], answers[2 * i] = fence, previous
  elseif redis.call('EXISTS', lockKey) == 1 then
    redis.call('HSET', lockKey, 'contended', 1)
    answers[2 * i - 1], answers[2 * i] = -1, redis.call('PTTL', lockKey)
  else
    answers[2 * i - 1], answers[2 * i] = -3, 0
  end
end
return answers
