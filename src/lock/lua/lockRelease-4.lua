--[[
  Drops a hold of a reentrant lock (release.lua says how, and what it answers).

  Input:
    KEYS[1..4] lock hash, fencing counter, fair queue and queue deadlines (as lockAcquire's)
    ARGV[1] owner
    ARGV[2] lease in milliseconds for the waiter it is handed to
    ARGV[3] channel for the release notice
    ARGV[4] release notice payload
    ARGV[5] channel for hand-off notices ("owner\nfence\nleaseMs")
    ARGV[6] '0': drop one hold; '1': leave the queue and drop every hold (a waiter giving up, a shutdown)
    ARGV[7] the last token the holder handed out of those it reserved (0: none reserved)
]]
--@include release
return release(KEYS, ARGV[1], ARGV[6] == '1', tonumber(ARGV[7] or '0'), tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5])
