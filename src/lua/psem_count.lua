-- Counts the permits of the expirable-permit semaphore KEYS[1] (see
-- psem_acquire.lua) after taking back those whose lease ended. KEYS[2]:
-- the permits taken; KEYS[3]: the channel.
-- Returns {free permits (-1: none set), permits taken}.

-- Anything but a counter and a zset under these names is someone else's data.
local function check_types()
  local t = redis.call('type', KEYS[1]).ok
  if t ~= 'none' and t ~= 'string' then
    return redis.error_reply('NOTLOCK ' .. t .. ' key, not a semaphore')
  end
  if t == 'string' and tonumber(redis.call('get', KEYS[1])) == nil then
    return redis.error_reply('NOTLOCK the string is not a number of permits')
  end
  t = redis.call('type', KEYS[2]).ok
  if t ~= 'none' and t ~= 'zset' then
    return redis.error_reply('NOTLOCK ' .. t .. " key, not a semaphore's permits")
  end
  return false
end

local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Permits whose lease ended (score at or before now) come back, as in every
-- script of Redisson's that looks at the semaphore, and its waiters are told
-- the new number of free permits. Bounded per call so that one call cannot
-- stall Redis; the next call takes the rest.
local function reclaim(now)
  local gone = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, 1000)
  if #gone == 0 then
    return
  end
  redis.call('zrem', KEYS[2], unpack(gone))
  local free = redis.call('incrby', KEYS[1], #gone)
  if free > 0 then
    redis.call('publish', KEYS[3], free)
  end
end

local invalid = check_types()
if invalid then
  return invalid
end
reclaim(now)
local free = tonumber(redis.call('get', KEYS[1]))
return {free == nil and -1 or free, redis.call('zcard', KEYS[2])}
