-- Release one write hold of writer field ARGV[3] on the read-write lock
-- KEYS[1]. When the last write hold goes, every waiter is told to retry
-- (message ARGV[1], "1", on channel KEYS[2]): readers may all go now.
-- KEYS[3]: the latch of this release. ARGV[2]: lease ms to restore while
-- held; ARGV[4]: latch lifetime ms; ARGV[5]: the hold count the client
-- believes the owner has (0: unknown).
-- Returns the write holds left, or -1 for none.

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
if redis.call('hget', KEYS[1], 'mode') ~= 'write' then
  return -1
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
if count == nil then
  return -1
end
-- One hold less than the client counts (ARGV[5], 0: unknown).
local left = tonumber(ARGV[5])
left = (left > 0 and left or count) - 1
redis.call('set', KEYS[3], left, 'px', ARGV[4])
if left > 0 then
  redis.call('hset', KEYS[1], ARGV[3], left)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return left
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
else
  -- The writer still reads (a downgrade): the lock stays, in read mode.
  redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call('publish', KEYS[2], ARGV[1])
return 0
