-- Release the last hold of owner field ARGV[1] on the reentrant lock
-- KEYS[1] by handing the lock straight to owner field ARGV[2], a waiter of
-- the same client, with lease ARGV[3] ms and a new token from KEYS[2]. No
-- unlock message is published: the lock is never free, so no waiter
-- anywhere is woken for nothing. KEYS[3]: the latch that makes a retry
-- answer like the first run; ARGV[4]: its lifetime in ms.
-- Returns {0, token} when handed over, or {-1, 0} when ARGV[1] holds none.
local done = redis.call('get', KEYS[3])
if done then
  return {0, tonumber(done)}
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return {-1, 0}
end
local token = redis.call('incr', KEYS[2])
redis.call('set', KEYS[3], token, 'px', ARGV[4])
redis.call('del', KEYS[1])
redis.call('hset', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[3])
return {0, token}
