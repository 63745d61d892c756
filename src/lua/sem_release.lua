-- Gives ARGV[1] permits back to semaphore KEYS[1] and tells KEYS[2], the
-- semaphore's channel, the new number of free permits, as Redisson's
-- RSemaphore.release does (its waiters wake as many of themselves as there
-- are free permits). ARGV[1]: 1..2^31-1.
-- Returns the free permits after the release.

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
if t ~= 'none' and t ~= 'string' then
  return redis.error_reply('NOTLOCK ' .. t .. ' key, not a semaphore')
end
if t == 'string' and tonumber(redis.call('get', KEYS[1])) == nil then
  return redis.error_reply('NOTLOCK the string is not a number of permits')
end
local free = redis.call('incrby', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], free)
return free
