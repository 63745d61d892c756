-- Owner field ARGV[1] stops waiting for the fair lock KEYS[1]: remove it
-- from the queue KEYS[2], deadlines KEYS[3] and dlock's waiter entries
-- KEYS[5]. The deadlines behind it were chained one allowance (ARGV[3]
-- ms) after its own, so each loses one allowance, as Redisson's scripts
-- do when one of their waiters gives up. If a release had already handed
-- it the lock (ARGV[2], the hold count the client believes in, is then
-- 0), give the lock up again. If it was first in line, or gave the lock
-- up, and the lock is free, tell the next owner (channel KEYS[4] .. ':' ..
-- <owner>), who would otherwise sleep until its next try.
--@include numbers
local invalid = bad_numbers(2, 0, COUNT_MAX, 3, 1, MS_MAX)
if invalid then
  return invalid
end

redis.call('hdel', KEYS[5], ARGV[1])
local head = redis.call('lindex', KEYS[2], 0)
local handed = tonumber(ARGV[2]) == 0 and
    redis.call('hexists', KEYS[1], ARGV[1]) == 1
if handed then
  redis.call('del', KEYS[1])
end
local queue = redis.call('lrange', KEYS[2], 0, -1)
local behind = false
for i = 1, #queue do
  if behind then
    local score = tonumber(redis.call('zscore', KEYS[3], queue[i]))
    if score ~= nil then
      redis.call('zadd', KEYS[3], score - tonumber(ARGV[3]), queue[i])
    end
  elseif queue[i] == ARGV[1] then
    behind = true
  end
end
local removed = redis.call('lrem', KEYS[2], 0, ARGV[1])
redis.call('zrem', KEYS[3], ARGV[1])
if removed == 0 and not handed then
  return 0
end
local next = redis.call('lindex', KEYS[2], 0)
if (head == ARGV[1] or handed) and next and
    redis.call('exists', KEYS[1]) == 0 then
  redis.call('publish', KEYS[4] .. ':' .. next, '0')
end
return 1
