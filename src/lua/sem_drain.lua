-- Takes every free permit of semaphore KEYS[1] (Redisson's drainPermits):
-- the counter is set to 0. Returns how many were free.

local t = redis.call('type', KEYS[1]).ok
if t == 'none' then
  return 0
end
if t ~= 'string' then
  return redis.error_reply('NOTLOCK ' .. t .. ' key, not a semaphore')
end
local free = tonumber(redis.call('get', KEYS[1]))
if free == nil then
  return redis.error_reply('NOTLOCK the string is not a number of permits')
end
redis.call('set', KEYS[1], 0)
return free
