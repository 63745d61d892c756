-- Gives ARGV[1] permits back to semaphore KEYS[1] and tells KEYS[2], the
-- semaphore's channel, the new number of free permits, as Redisson's
-- RSemaphore.release does (its waiters wake as many of themselves as there
-- are free permits). ARGV[1]: 1..2^31-1.
-- Returns the free permits after the release.

--@include numbers
local invalid = bad_numbers(1, 1, '2147483647')
if invalid then
  return invalid
end

--@include semaphore
local free = redis.call('incrby', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], free)
return free
