-- Sets the count of count-down latch KEYS[1] (Redisson's RCountDownLatch:
-- a string holding the count, deleted when it reaches zero) only if it has
-- none: Redisson's trySetCount. KEYS[2]: the latch's channel, told '1' (a
-- new count: Redisson's waiters close their local latch). ARGV[1]: the
-- count, 1..2^53 (Lua counts in doubles).
-- Returns 1 when set, 0 when the latch already had a count.

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
local invalid = bad(1, 1, 9007199254740992)
if invalid then
  return invalid
end

local t = redis.call('type', KEYS[1]).ok
if t ~= 'none' and t ~= 'string' then
  return redis.error_reply('NOTLOCK ' .. t .. ' key, not a count-down latch')
end
if t == 'string' then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], '1')
return 1
