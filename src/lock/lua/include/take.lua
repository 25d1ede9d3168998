--@include issue-fence
--[[
  Gives the lock to `owner` as a new hold (count 1, nobody said to want it) under a new fencing token, for `leaseMs`.
  Returns the token and the one issued just before it. Every script that grants a hold grants it through here.
]]
local function take(lockKey, fenceKey, owner, leaseMs)
  local fence, previous = issueFence(fenceKey)
  redis.call('HSET', lockKey, 'owner', owner, 'count', 1, 'fence', string.format('%.0f', fence))
  redis.call('PEXPIRE', lockKey, leaseMs)
  return fence, previous
end
