-- Gives back the permit ARGV[1] of the expirable-permit semaphore KEYS[1]
-- (see psem_acquire.lua) and tells KEYS[3], its channel, the new number of
-- free permits. KEYS[2]: the permits taken. ARGV[1]: the id as 16 bytes,
-- as Redisson stores it; ARGV[2]: the same id in hexadecimal, as Redisson
-- releases before its 16-byte ids stored it.
-- Returns 1 when given back within its lease, 0 when given back after its
-- lease had ended (another holder may have used it meanwhile), -1 when no
-- such permit is taken (never acquired, released already, or taken back
-- after its lease ended).

--@include psem
local member = ARGV[1]
local ends = redis.call('zscore', KEYS[2], member)
if not ends then
  member = ARGV[2]
  ends = redis.call('zscore', KEYS[2], member)
end
if not ends then
  return -1
end
redis.call('zrem', KEYS[2], member)
local free = redis.call('incrby', KEYS[1], 1)
redis.call('publish', KEYS[3], free)
if tonumber(ends) <= now then
  return 0
end
return 1
