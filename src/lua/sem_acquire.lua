-- Takes ARGV[1] permits of semaphore KEYS[1] (Redisson's RSemaphore: a
-- string holding the number of free permits) if that many are free.
-- ARGV[1]: 1..2^31-1.
-- Returns {1, free permits left} when taken, else {0, free permits}, the
-- free permits being -1 when the semaphore has none set at all.

local invalid = bad_numbers(1, 1, '2147483647')
if invalid then
  return invalid
end

local t = redis.call('type', KEYS[1]).ok
if t == 'none' then
  return {0, -1}
end
if t ~= 'string' then
  return redis.error_reply('NOTLOCK ' .. t .. ' key, not a semaphore')
end
local free = tonumber(redis.call('get', KEYS[1]))
if free == nil then
  return redis.error_reply('NOTLOCK the string is not a number of permits')
end
local n = tonumber(ARGV[1])
if free < n then
  return {0, free}
end
return {1, redis.call('incrby', KEYS[1], -n)}
