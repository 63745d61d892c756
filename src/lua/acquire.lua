-- Acquire the reentrant lock KEYS[1] for owner field ARGV[2].
-- KEYS[2]: fencing counter. ARGV[1]: lease in ms. ARGV[3]: the hold count
-- the client believes the owner has (0 when it believes it holds none);
-- the owner's count becomes that plus one.
-- Returns {1, token, count} when held by the owner afterwards,
-- {0, pttl} when another owner holds it, or {2, 0} when the hold the
-- client believes in is gone.

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
local invalid = bad(1, 1, 1e12) or bad(3, 0, 2147483646)
if invalid then
  return invalid
end

local count = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
if count == nil then
  if tonumber(ARGV[3]) > 0 then
    -- The client believes the owner holds it, but its hold expired or was
    -- deleted: report that rather than quietly start a new hold.
    return {2, 0}
  end
  if redis.call('exists', KEYS[1]) == 1 then
    return {0, redis.call('pttl', KEYS[1])}
  end
  -- Free: a new hold, and the only place a new fencing token is issued.
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, redis.call('incr', KEYS[2]), 1}
end
-- Held by this owner already: one more hold than the client counts. Set,
-- not incremented, so that an earlier try whose reply was lost (and may or
-- may not have run) cannot leave the server counting one hold more than
-- the caller will ever release.
count = tonumber(ARGV[3]) + 1
redis.call('hset', KEYS[1], ARGV[2], count)
redis.call('pexpire', KEYS[1], ARGV[1])
return {1, tonumber(redis.call('get', KEYS[2])) or 0, count}
