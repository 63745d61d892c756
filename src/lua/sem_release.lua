-- Gives ARGV[1] permits back to semaphore KEYS[1] and tells KEYS[2], the
-- semaphore's channel, the new number of free permits, as Redisson's
-- RSemaphore.release does (its waiters wake as many of themselves as there
-- are free permits). ARGV[1]: 1..2^31-1.
-- Returns the free permits after the release.

local invalid = bad_numbers(1, 1, '2147483647')
if invalid then
  return invalid
end

local t = redis.call('type', KEYS[1]).ok
if t ~= 'none' and t ~= 'string' then
  return redis.error_reply('NOTLOCK ' .. t .. ' key, not a semaphore')
end
if t == 'string' and tonumber(redis.call('get', KEYS[1])) == nil then
  return redis.error_reply('NOTLOCK the string is not a number of permits')
end
local free = redis.call('incrby', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], free)
return free
