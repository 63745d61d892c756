-- Release one read hold of owner field ARGV[2] on the read-write lock
-- KEYS[1]. KEYS[2]: the lock's channel; KEYS[3]: this owner's hold-timeout
-- key prefix; KEYS[4]: the prefix of every owner's ("{name}"); KEYS[5]:
-- the latch of this release. ARGV[1]: unlock message; ARGV[3]: latch
-- lifetime ms. Returns the owner's read holds left, or -1 for none.

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
local invalid = bad(3, 1, 1e12) or bad(4, 0, 2147483646)
if invalid then
  return invalid
end

local done = redis.call('get', KEYS[5])
if done then
  return tonumber(done)
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
if count == nil then
  return -1
end
-- One hold less than the client counts (ARGV[4], 0: unknown).
local left = tonumber(ARGV[4])
left = (left > 0 and left or count) - 1
redis.call('set', KEYS[5], left, 'px', ARGV[3])
if left <= 0 then
  redis.call('hdel', KEYS[1], ARGV[2])
else
  redis.call('hset', KEYS[1], ARGV[2], left)
end
-- Hold n's timeout key goes with hold n (any above it belonged to a hold
-- the server counted and the client did not).
for n = math.max(count, left + 1), left + 1, -1 do
  redis.call('del', KEYS[3] .. ':' .. n)
end
if redis.call('hlen', KEYS[1]) > 1 then
  -- Other holds remain: the lock lives as long as the longest of them.
  local longest = -3
  for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
    local n = tonumber(redis.call('hget', KEYS[1], field))
    if n then
      for i = n, 1, -1 do
        local key = KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i
        longest = math.max(longest, redis.call('pttl', key))
      end
    end
  end
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    return left
  end
  if redis.call('hget', KEYS[1], 'mode') == 'write' then
    return left
  end
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return left
