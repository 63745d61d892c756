-- Takes every free permit of semaphore KEYS[1] (Redisson's drainPermits):
-- the counter is set to 0. Returns how many were free.

--@include semaphore
if count == nil then
  return 0
end
redis.call('set', KEYS[1], 0)
return count
