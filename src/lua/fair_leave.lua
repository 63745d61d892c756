-- Owner field ARGV[1] stops waiting for the fair lock KEYS[1]: remove it
-- from the queue KEYS[2], deadlines KEYS[3] and hand-over leases KEYS[5].
-- If a release had already handed it the lock (ARGV[2], the hold count the
-- client believes in, is then 0), give the lock up again. If it was first
-- in line, or gave the lock up, and the lock is free, tell the next owner
-- (channel KEYS[4] .. ':' .. <owner>), who would otherwise sleep until its
-- next try.

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
local invalid = bad(2, 0, 2147483646)
if invalid then
  return invalid
end

redis.call('hdel', KEYS[5], ARGV[1])
local head = redis.call('lindex', KEYS[2], 0)
local handed = tonumber(ARGV[2]) == 0 and
    redis.call('hexists', KEYS[1], ARGV[1]) == 1
if handed then
  redis.call('del', KEYS[1])
end
local removed = redis.call('lrem', KEYS[2], 0, ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
if removed == 0 and not handed then
  return 0
end
local next = redis.call('lindex', KEYS[2], 0)
if (head == ARGV[1] or handed) and next and
    redis.call('exists', KEYS[1]) == 0 then
  redis.call('publish', KEYS[4] .. ':' .. next, '0')
end
return 1
