-- Release the last hold of owner field ARGV[1] on the reentrant lock
-- KEYS[1] by handing the lock straight to owner field ARGV[2], a waiter of
-- the same client, with lease ARGV[3] ms and a new token from KEYS[2]. No
-- unlock message is published: the lock is never free, so no waiter
-- anywhere is woken for nothing. KEYS[3]: the latch that makes a retry
-- answer like the first run; ARGV[4]: its lifetime in ms.
--
-- With ARGV[5] = '1' (the client has handed the lock over several times in
-- a row), the lock is released for every client instead, with unlock
-- message ARGV[6] on channel KEYS[4], when another client listens there:
-- their waiters get their turn. Alone on the channel, the client keeps
-- handing it over, since nobody else would take it.
--
-- Returns {0, token} when handed over, {-1, 0} when ARGV[1] holds none,
-- {1, 0} when released for everyone because another client listens, or
-- {2, 0} when released for everyone without knowing (the user may not run
-- PUBSUB NUMSUB).

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
local invalid = bad(3, 1, 1e12) or bad(4, 1, 1e12)
if invalid then
  return invalid
end

local done = redis.call('get', KEYS[3])
if done == 'others' then
  return {1, 0}
elseif done == 'unknown' then
  return {2, 0}
elseif done then
  return {0, tonumber(done)}
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return {-1, 0}
end
if ARGV[5] == '1' then
  -- pcall: a user without the PUBSUB command still releases, as before.
  local numsub = redis.pcall('pubsub', 'numsub', KEYS[4])
  local listening = nil
  if type(numsub) == 'table' then
    listening = tonumber(numsub[2])
  end
  if listening == nil or listening > 1 then
    redis.call('set', KEYS[3], listening and 'others' or 'unknown', 'px',
               ARGV[4])
    redis.call('del', KEYS[1])
    redis.call('publish', KEYS[4], ARGV[6])
    return {listening and 1 or 2, 0}
  end
end
local token = redis.call('incr', KEYS[2])
redis.call('set', KEYS[3], token, 'px', ARGV[4])
redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[3])
return {0, token}
