-- Raise the fencing counter KEYS[1] to at least ARGV[1] (a RedLock token
-- issued by a majority of nodes), so that whatever majority grants the lock
-- next includes a node that issues a larger token.
-- At most the largest counter Redis keeps (2^63-1): INCR would refuse
-- anything above it from then on.
--@include numbers
local invalid = bad_numbers(1, 0, '9223372036854775807')
if invalid then
  return invalid
end

local current = tonumber(redis.call('get', KEYS[1])) or 0
if current < tonumber(ARGV[1]) then
  redis.call('set', KEYS[1], ARGV[1])
end
return 1
