-- Delete the lock KEYS[1] whoever holds it, and tell waiters on channel
-- KEYS[2] with message ARGV[1]. Returns 1 when there was a lock, else 0.
if redis.call('del', KEYS[1]) == 1 then
  redis.call('publish', KEYS[2], ARGV[1])
  return 1
end
return 0
