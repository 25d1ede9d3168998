--[[
  Releases a lock only if the caller still owns it, and tells waiters.

  Input:
    KEYS[1] lock key
    ARGV[1] owner token
    ARGV[2] channel for the unlock notice
    ARGV[3] notice payload

  Output:
    1  released (notice published)
    0  not the owner (expired or taken over): nothing changed
]]
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3])
return 1
