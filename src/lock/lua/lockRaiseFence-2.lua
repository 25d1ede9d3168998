--[[
  Redlock's second round: once a quorum granted the lock, every granting node learns the token chosen (the largest
  any of them issued), so any later quorum, which shares a node with this one, issues a larger token.

  Input:
    KEYS[1] lock hash
    KEYS[2] fencing counter
    ARGV[1] owner
    ARGV[2] fencing token chosen

  Output:
     1  recorded
    -2  not the owner any more: nothing changed
]]
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return -2
end
redis.call('HSET', KEYS[1], 'fence', ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', 604800000)
end
return 1
