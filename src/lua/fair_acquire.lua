-- Acquire the fair lock KEYS[1] for owner field ARGV[2], in queue order.
-- KEYS[2]: the queue (list of owner fields, head first); KEYS[3]: each
-- queued owner's deadline (zset, Unix ms); KEYS[4]: fencing counter;
-- KEYS[5]: the lock's channel, to which ':' .. <owner> is added to tell
-- one waiter it is its turn; KEYS[6]: the lease each queued owner is to be
-- handed the lock with (hash; see fair_release.lua).
-- ARGV[1]: lease ms; ARGV[3]: how long a queued owner may stay silent
-- before it counts as gone (ms); ARGV[4]: the hold count the client
-- believes the owner has; ARGV[5]: '1' to join the queue when the lock is
-- taken, '0' not to.
-- Returns {1, token, count} when held, {0, ms to sleep at most, fencing
-- counter}, or {2, 0} when the hold the client believes in is gone. The
-- counter lets the owner tell a hand-over message sent after this attempt
-- (its token is higher) from one sent before it and only now delivered.

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
local invalid = bad(1, 1, 1e12) or bad(3, 1, 1e12) or bad(4, 0, 2147483646)
if invalid then
  return invalid
end

local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wait = tonumber(ARGV[3])

-- Owners at the head whose deadline passed are gone (their process died
-- without leaving the queue): drop them so the queue never wedges. Live
-- waiters push their own deadline forward each time they try (below), so
-- a dead one is dropped one allowance after its last sign of life, not one
-- allowance per dead owner ahead of it.
local dropped = false
while true do
  local head = redis.call('lindex', KEYS[2], 0)
  if not head then break end
  local deadline = tonumber(redis.call('zscore', KEYS[3], head))
  if deadline ~= nil and deadline > now then break end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], head)
  redis.call('hdel', KEYS[6], head)
  dropped = true
end

local count = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
if count == nil and tonumber(ARGV[4]) > 0 then
  -- The client believes the owner holds it, but the hold is gone.
  return {2, 0}
end
if count ~= nil then
  -- Already held by this owner: one more hold than the client counts (set,
  -- so a retry whose first reply was lost does not count twice). With no
  -- hold counted, this is the lock handed over by a release whose message
  -- the owner missed, and its token is the latest.
  count = tonumber(ARGV[4]) + 1
  redis.call('hset', KEYS[1], ARGV[2], count)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, tonumber(redis.call('get', KEYS[4])) or 0, count}
end

local head = redis.call('lindex', KEYS[2], 0)
local free = redis.call('exists', KEYS[1]) == 0
if free and (not head or head == ARGV[2]) then
  if head then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], ARGV[2])
    redis.call('hdel', KEYS[6], ARGV[2])
  end
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, redis.call('incr', KEYS[4]), 1}
end
if free and dropped then
  -- The lock is free and the new head was never told: tell it now.
  redis.call('publish', KEYS[5] .. ':' .. head, '0')
end

-- Taken, or another owner is first in line. Sleep until the lock's lease
-- ends at most, and never longer than a third of the allowance, so that a
-- queued owner shows it is alive well before its deadline.
local sleep = redis.call('pttl', KEYS[1])
local beat = math.floor(wait / 3)
if sleep < 0 or sleep > beat then
  sleep = beat
end
local queued = redis.call('zscore', KEYS[3], ARGV[2])
if ARGV[5] == '0' and not queued then
  return {0, sleep, tonumber(redis.call('get', KEYS[4])) or 0}
end
if queued then
  if now + wait > tonumber(queued) then
    redis.call('zadd', KEYS[3], now + wait, ARGV[2])
  end
else
  redis.call('zadd', KEYS[3], now + wait, ARGV[2])
  redis.call('rpush', KEYS[2], ARGV[2])
end
-- A release may hand this owner the lock directly (it waits on its own
-- channel for word of it), rather than wake it to come and take it. The
-- lease it is handed is cut to the allowance, as an owner that does not
-- take up the lock is no more alive than a silent waiter.
redis.call('hset', KEYS[6], ARGV[2], math.min(tonumber(ARGV[1]), wait))
redis.call('pexpire', KEYS[6], wait)
return {0, sleep, tonumber(redis.call('get', KEYS[4])) or 0}
