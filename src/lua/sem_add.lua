-- Adds ARGV[1] permits to semaphore KEYS[1] (ARGV[2] '1'), or takes that
-- many away (ARGV[2] '0'), as Redisson's addPermits does with a positive
-- or a negative number. KEYS[2]: the semaphore's channel, told the new
-- number of free permits when it grows, so that waiters try again.
-- ARGV[1]: 1..2^31-1.
-- Returns the free permits after the change, or -1 when there are fewer
-- free permits than ARGV[1] to take away (nothing is changed then: a
-- semaphore never goes below zero here).

--@include numbers
local invalid = bad_numbers(1, 1, '2147483647', 2, 0, '1')
if invalid then
  return invalid
end

--@include semaphore
local free = count or 0
local n = tonumber(ARGV[1])
if ARGV[2] == '0' then
  if free < n then
    return -1
  end
  return redis.call('incrby', KEYS[1], -n)
end
local now = redis.call('incrby', KEYS[1], n)
redis.call('publish', KEYS[2], now)
return now
