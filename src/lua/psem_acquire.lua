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

--@include numbers
local invalid = bad_numbers(1, 1, MS_MAX)
if invalid then
  return invalid
end

--@include psem
--@include psem_reclaim
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
