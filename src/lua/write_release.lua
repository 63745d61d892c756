-- Release one write hold of writer field ARGV[3] on the read-write lock
-- KEYS[1]. When the last write hold goes, every waiter is told to retry
-- (message ARGV[1], "1", on channel KEYS[2]): readers may all go now.
-- KEYS[3]: the latch of this release. ARGV[2]: lease ms to restore while
-- held; ARGV[4]: latch lifetime ms.
-- Returns the write holds left, or -1 for none.
local done = redis.call('get', KEYS[3])
if done then
  return tonumber(done)
end
if redis.call('hget', KEYS[1], 'mode') ~= 'write' then
  return -1
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
if count == nil then
  return -1
end
redis.call('set', KEYS[3], count - 1, 'px', ARGV[4])
if count > 1 then
  redis.call('hincrby', KEYS[1], ARGV[3], -1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return count - 1
end
redis.call('hdel', KEYS[1], ARGV[3])
if redis.call('hlen', KEYS[1]) == 1 then
  redis.call('del', KEYS[1])
else
  -- The writer still reads (a downgrade): the lock stays, in read mode.
  redis.call('hset', KEYS[1], 'mode', 'read')
end
redis.call('publish', KEYS[2], ARGV[1])
return 0
