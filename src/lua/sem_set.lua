-- Sets the permits of semaphore KEYS[1] (Redisson's RSemaphore and
-- RPermitExpirableSemaphore: a string holding the number of free permits),
-- only if they were never set: Redisson's trySetPermits. KEYS[2]: the
-- semaphore's channel, told the new number so that waiters try again.
-- ARGV[1]: the permits, 0..2^31-1 (Redisson counts them in a Java int).
-- Returns 1 when set, 0 when the semaphore already had permits.

--@include numbers
local invalid = bad_numbers(1, 0, '2147483647')
if invalid then
  return invalid
end

local KIND, MESSAGE = 'semaphore', ARGV[1]
--@include try_set
