-- Takes one permit of the expirable-permit semaphore KEYS[1] (Redisson's
-- RPermitExpirableSemaphore: a string holding the number of free permits)
-- for permit id ARGV[2], leased for ARGV[1] ms. KEYS[2]: the permits taken
-- (zset "{name}:timeout", member the id, score the Unix ms at which its
-- lease ends; Redisson's permits without a lease carry 922337203685477);
-- KEYS[3]: the semaphore's channel; KEYS[4]: the fencing counter.
-- ARGV[1]: 1..10^12 (dlock.h's DLOCK_DURATION_MAX_MS); ARGV[2]: the id.
-- Returns {1, fencing token, Unix ms the lease ends} when taken, else
-- {0, ms until the first lease among the permits taken ends (-1: none),
-- free permits (-1: none set)}.

local invalid = bad_numbers(1, 1, MS_MAX)
if invalid then
  return invalid
end

-- Anything but a counter and a zset under these names is someone else's data.
local function check_types()
  local t = redis.call('type', KEYS[1]).ok
  if t ~= 'none' and t ~= 'string' then
    return redis.error_reply('NOTLOCK ' .. t .. ' key, not a semaphore')
  end
  if t == 'string' and tonumber(redis.call('get', KEYS[1])) == nil then
    return redis.error_reply('NOTLOCK the string is not a number of permits')
  end
  t = redis.call('type', KEYS[2]).ok
  if t ~= 'none' and t ~= 'zset' then
    return redis.error_reply('NOTLOCK ' .. t .. " key, not a semaphore's permits")
  end
  return false
end

local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Permits whose lease ended (score at or before now) come back, as in every
-- script of Redisson's that looks at the semaphore, and its waiters are told
-- the new number of free permits. Bounded per call so that one call cannot
-- stall Redis; the next call takes the rest.
local function reclaim(now)
  local gone = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, 1000)
  if #gone == 0 then
    return
  end
  redis.call('zrem', KEYS[2], unpack(gone))
  local free = redis.call('incrby', KEYS[1], #gone)
  if free > 0 then
    redis.call('publish', KEYS[3], free)
  end
end

invalid = check_types()
if invalid then
  return invalid
end
reclaim(now)
local free = tonumber(redis.call('get', KEYS[1]))
if free ~= nil and free >= 1 then
  local ends = now + tonumber(ARGV[1])
  redis.call('incrby', KEYS[1], -1)
  redis.call('zadd', KEYS[2], ends, ARGV[2])
  -- A semaphore given a time to live keeps its permits as long, as
  -- Redisson's does.
  local ttl = redis.call('pttl', KEYS[1])
  if ttl > 0 then
    redis.call('pexpire', KEYS[2], ttl)
  end
  return {1, redis.call('incr', KEYS[4]), ends}
end
local wait = -1
local first = redis.call('zrange', KEYS[2], 0, 0, 'withscores')
if first[2] ~= nil and tonumber(first[2]) < 922337203685477 then
  wait = math.max(tonumber(first[2]) - now, 0)
end
return {0, wait, free == nil and -1 or free}
