-- Release one hold of owner field ARGV[3] on the reentrant lock KEYS[1].
-- KEYS[2]: channel told when the lock becomes free; KEYS[3]: the latch
-- that makes a retried release return the first answer instead of
-- releasing twice. ARGV[1]: unlock message; ARGV[2]: lease in ms to restore
-- while still held; ARGV[4]: latch lifetime in ms; ARGV[5]: the hold count
-- the client believes the owner has (0: unknown).
-- Returns the holds left (0: now free), or -1 when the owner holds none.

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
local invalid = bad(2, 1, 1e12) or bad(4, 1, 1e12) or bad(5, 0, 2147483646)
if invalid then
  return invalid
end

local done = redis.call('get', KEYS[3])
if done then
  return tonumber(done)
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
if count == nil then
  return -1
end
-- One hold less than the client counts, when it counts (it knows what its
-- caller still has to release); else one less than the server's.
local left = tonumber(ARGV[5])
left = (left > 0 and left or count) - 1
-- The latch is written before anything changes, so a refused write (OOM)
-- leaves the lock exactly as it was.
redis.call('set', KEYS[3], left, 'px', ARGV[4])
if left > 0 then
  redis.call('hset', KEYS[1], ARGV[3], left)
  redis.call('pexpire', KEYS[1], ARGV[2])
else
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], ARGV[1])
end
return left
