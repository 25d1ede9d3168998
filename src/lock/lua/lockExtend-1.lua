--[[
  Renews the lease of a reentrant lock held by the caller.

  Input:
    KEYS[1] lock hash
    ARGV[1] owner
    ARGV[2] new lease in milliseconds

  Output:
     1  renewed
    -2  not the owner (expired or taken over): nothing changed
]]
if redis.call('HGET', KEYS[1], 'owner') ~= ARGV[1] then
  return -2
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
