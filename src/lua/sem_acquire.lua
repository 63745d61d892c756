-- Takes ARGV[1] permits of semaphore KEYS[1] (Redisson's RSemaphore: a
-- string holding the number of free permits) if that many are free.
-- ARGV[1]: 1..2^31-1.
-- Returns {1, free permits left} when taken, else {0, free permits}, the
-- free permits being -1 when the semaphore has none set at all.

-- Numbers first: Redis keeps what a script wrote before one of its
-- commands failed, so an argument that a command would refuse must stop
-- the script before its first write.
local function bad(i, lo, hi)
  local s = ARGV[i]
  -- Digits without a leading zero, as Redis reads integers.
  local v = type(s) == 'string' and #s <= 19 and
      (s == '0' or s:match('^[1-9]%d*$')) and tonumber(s)
  if v and v >= lo and v <= hi then
    return false
  end
  return redis.error_reply('DLOCK_EINVAL ARGV[' .. i .. '] must be an ' ..
      'integer in ' .. lo .. '..' .. hi .. ', got "' ..
      (string.gsub(string.sub(tostring(s), 1, 24), '[^%w%.%-+ ]', '?')) .. '"')
end
local invalid = bad(1, 1, 2147483647)
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
