-- Permits whose lease ended (score at or before now) come back, as in every
-- script of Redisson's that looks at the semaphore, and its waiters are told
-- the new number of free permits. Bounded per call so that one call cannot
-- stall Redis; the next call takes the rest.
local gone = redis.call('zrangebyscore', KEYS[2], 0, now, 'limit', 0, 1000)
if #gone > 0 then
  redis.call('zrem', KEYS[2], unpack(gone))
  local free = redis.call('incrby', KEYS[1], #gone)
  if free > 0 then
    redis.call('publish', KEYS[3], free)
  end
end
