-- Renew many reentrant locks at once: KEYS[i] is a lock, ARGV[i + 1] its
-- owner field, ARGV[1] the lease in ms. Only a lock still held by its owner
-- is extended, so a released or stolen lock is never kept alive.
-- Returns one entry per lock: 1 renewed, 0 no longer held.

-- Numbers first: Redis keeps what a script wrote before one of its
-- commands failed, so an argument PEXPIRE or SET would refuse must stop the
-- script before its first write. Durations are 1..10^12 ms (dlock.h's
-- DLOCK_DURATION_MAX_MS), hold counts 0..2^31-2.
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
local invalid = bad(1, 1, 1e12)
if invalid then
  return invalid
end

local result = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    result[i] = 1
  else
    result[i] = 0
  end
end
return result
