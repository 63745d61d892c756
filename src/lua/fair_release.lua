-- Release one hold of owner field ARGV[3] on the fair lock KEYS[1]. When
-- it becomes free, the owner at the head of the queue KEYS[2] is handed
-- the lock at once if it left a lease in KEYS[6] (a dlock waiter): it
-- holds it with that lease and a new token from KEYS[7], and the message
-- "grant:<token>" on channel KEYS[4] .. ':' .. <head> tells it so, sparing
-- it the round trip of taking the lock itself. Any other head (a Redisson
-- waiter) is told "0" there and takes the lock itself.
-- KEYS[3]: queue deadlines (zset, Unix ms); KEYS[5]: the latch of this
-- release. ARGV[1]: unlock message; ARGV[2]: lease ms to restore while
-- held; ARGV[4]: latch lifetime ms; ARGV[5]: the hold count the client
-- believes the owner has (0: unknown).
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

local done = redis.call('get', KEYS[5])
if done then
  return tonumber(done)
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
if count == nil then
  return -1
end
-- One hold less than the client counts (ARGV[5], 0: unknown).
local left = tonumber(ARGV[5])
left = (left > 0 and left or count) - 1
redis.call('set', KEYS[5], left, 'px', ARGV[4])
if left > 0 then
  redis.call('hset', KEYS[1], ARGV[3], left)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return left
end
redis.call('del', KEYS[1])

-- Never hand the lock to an owner that counts as gone (see
-- fair_acquire.lua): drop those first.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local head
while true do
  head = redis.call('lindex', KEYS[2], 0)
  if not head then
    return 0
  end
  local deadline = tonumber(redis.call('zscore', KEYS[3], head))
  if deadline ~= nil and deadline > now then break end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], head)
  redis.call('hdel', KEYS[6], head)
end

local lease = redis.call('hget', KEYS[6], head)
if not lease then
  redis.call('publish', KEYS[4] .. ':' .. head, ARGV[1])
  return 0
end
redis.call('lpop', KEYS[2])
redis.call('zrem', KEYS[3], head)
redis.call('hdel', KEYS[6], head)
redis.call('hset', KEYS[1], head, 1)
redis.call('pexpire', KEYS[1], lease)
local token = redis.call('incr', KEYS[7])
redis.call('publish', KEYS[4] .. ':' .. head, 'grant:' .. token)
return 0
