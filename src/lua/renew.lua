-- Renew many reentrant locks at once: KEYS[i] is a lock, ARGV[i + 1] its
-- owner field, ARGV[1] the lease in ms. Only a lock still held by its owner
-- is extended, so a released or stolen lock is never kept alive.
-- Returns one entry per lock: 1 renewed, 0 no longer held.
--@include numbers
local invalid = bad_numbers(1, 1, MS_MAX)
if invalid then
  return invalid
end

local result = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    result[i] = 1
  else
    result[i] = 0
  end
end
return result
