-- Acquire the write side of the read-write lock KEYS[1] for writer field
-- ARGV[2]. KEYS[2]: fencing counter. ARGV[1]: lease ms; ARGV[3]: the hold
-- count the client believes the owner has.
-- Returns {1, token, count}, {0, pttl}, or {2, 0} when the hold the
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

local mode = redis.call('hget', KEYS[1], 'mode')
if tonumber(ARGV[3]) > 0 and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  -- The client believes the owner writes, but that hold is gone.
  return {2, 0}
end
if mode == false then
  redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, redis.call('incr', KEYS[2]), 1}
end
if mode == 'write' then
  local count = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
  if count ~= nil then
    -- One more hold than the client counts (set, not incremented: a retry
    -- whose first reply was lost must not count twice).
    count = tonumber(ARGV[3]) + 1
    redis.call('hset', KEYS[1], ARGV[2], count)
    redis.call('pexpire', KEYS[1],
               math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
    return {1, tonumber(redis.call('get', KEYS[2])) or 0, count}
  end
end
return {0, redis.call('pttl', KEYS[1])}
