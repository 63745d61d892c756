-- Owner field ARGV[1] stops waiting for the fair lock KEYS[1]: remove it
-- from the queue KEYS[2] and deadlines KEYS[3]. If it was first in line
-- and the lock is free, tell the next owner (channel KEYS[4] .. ':' ..
-- <owner>), who would otherwise sleep until its next try.
local head = redis.call('lindex', KEYS[2], 0)
if redis.call('lrem', KEYS[2], 0, ARGV[1]) == 0 then
  redis.call('zrem', KEYS[3], ARGV[1])
  return 0
end
redis.call('zrem', KEYS[3], ARGV[1])
local next = redis.call('lindex', KEYS[2], 0)
if head == ARGV[1] and next and redis.call('exists', KEYS[1]) == 0 then
  redis.call('publish', KEYS[4] .. ':' .. next, '0')
end
return 1
