-- Takes ARGV[1] permits of semaphore KEYS[1] (Redisson's RSemaphore: a
-- string holding the number of free permits) if that many are free.
-- ARGV[1]: 1..2^31-1.
-- Returns {1, free permits left} when taken, else {0, free permits}, the
-- free permits being -1 when the semaphore has none set at all.

--@include numbers
local invalid = bad_numbers(1, 1, '2147483647')
if invalid then
  return invalid
end

--@include semaphore
if count == nil then
  return {0, -1}
end
local n = tonumber(ARGV[1])
if count < n then
  return {0, count}
end
return {1, redis.call('incrby', KEYS[1], -n)}
