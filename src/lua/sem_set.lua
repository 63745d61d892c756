-- Sets the permits of semaphore KEYS[1] (Redisson's RSemaphore and
-- RPermitExpirableSemaphore: a string holding the number of free permits),
-- only if they were never set: Redisson's trySetPermits. KEYS[2]: the
-- semaphore's channel, told the new number so that waiters try again.
-- ARGV[1]: the permits, 0..2^31-1 (Redisson counts them in a Java int).
-- Returns 1 when set, 0 when the semaphore already had permits.

local invalid = bad_numbers(1, 0, '2147483647')
if invalid then
  return invalid
end

-- Anything but a counter under the name is someone else's data.
local t = redis.call('type', KEYS[1]).ok
if t ~= 'none' and t ~= 'string' then
  return redis.error_reply('NOTLOCK ' .. t .. ' key, not a semaphore')
end
if t == 'string' then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
