-- Gives back the permit ARGV[1] of the expirable-permit semaphore KEYS[1]
-- (see psem_acquire.lua) and tells KEYS[3], its channel, the new number of
-- free permits. KEYS[2]: the permits taken. ARGV[1]: the id as 16 bytes,
-- as Redisson stores it; ARGV[2]: the same id in hexadecimal, as Redisson
-- releases before its 16-byte ids stored it.
-- Returns 1 when given back within its lease, 0 when given back after its
-- lease had ended (another holder may have used it meanwhile), -1 when no
-- such permit is taken (never acquired, released already, or taken back
-- after its lease ended).

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


local invalid = check_types()
if invalid then
  return invalid
end
local member = ARGV[1]
local ends = redis.call('zscore', KEYS[2], member)
if not ends then
  member = ARGV[2]
  ends = redis.call('zscore', KEYS[2], member)
end
if not ends then
  return -1
end
redis.call('zrem', KEYS[2], member)
local free = redis.call('incrby', KEYS[1], 1)
redis.call('publish', KEYS[3], free)
if tonumber(ends) <= now then
  return 0
end
return 1
