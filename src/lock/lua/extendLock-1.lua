--[[
  Extends a held lock's lease.

  Input:
    KEYS[1] lock key
    ARGV[1] owner token
    ARGV[2] new lease in milliseconds

  Output:
    1  extended
    0  not the owner: nothing changed
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
