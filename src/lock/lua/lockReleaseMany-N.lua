--[[
  Drops one hold of each of several locks in one call, each as lockRelease drops it (release.lua).

  Input (numkeys = 4 × locks):
    KEYS[4i-3] .. KEYS[4i]  lock i's hash, fencing counter, fair queue and queue deadlines
    ARGV[3i-2]              lock i's owner
    ARGV[3i-1], ARGV[3i]    lock i's channels for the release notice and for hand-off notices
    ARGV[#KEYS / 4 * 3 + 1] lease in milliseconds for a waiter a lock is handed to
    ARGV[#KEYS / 4 * 3 + 2] release notice payload

  Output, three values per lock: release.lua's answer, padded with zeros.
]]
--@include release
local locks = #KEYS / 4
local handOffLeaseMs, notice = tonumber(ARGV[3 * locks + 1]), ARGV[3 * locks + 2]
local answers = {}
for i = 1, locks do
  local keys = {KEYS[4 * i - 3], KEYS[4 * i - 2], KEYS[4 * i - 1], KEYS[4 * i]}
  local owner, releasedChannel, grantedChannel = ARGV[3 * i - 2], ARGV[3 * i - 1], ARGV[3 * i]
  local answer = release(keys, owner, false, 0, handOffLeaseMs, releasedChannel, notice, grantedChannel)
  for j = 1, 3 do answers[3 * (i - 1) + j] = answer[j] or 0 end
end
return answers
