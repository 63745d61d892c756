-- Owner field ARGV[1] stops waiting for the fair lock KEYS[1]: remove it
-- from the queue KEYS[2] and deadlines KEYS[3]; those behind it get one
-- absence allowance (ARGV[2] ms) less. If it was first in line and the lock
-- is free, tell the next owner (channel KEYS[4] .. ':' .. <owner>), who
-- would otherwise sleep until its deadline.
local queue = redis.call('lrange', KEYS[2], 0, -1)
local pos = nil
for i = 1, #queue do
  if queue[i] == ARGV[1] then
    pos = i
    break
  end
end
if pos == nil then
  return 0
end
for i = pos + 1, #queue do
  redis.call('zincrby', KEYS[3], -tonumber(ARGV[2]), queue[i])
end
redis.call('zrem', KEYS[3], ARGV[1])
redis.call('lrem', KEYS[2], 0, ARGV[1])
if pos == 1 and queue[2] and redis.call('exists', KEYS[1]) == 0 then
  redis.call('publish', KEYS[4] .. ':' .. queue[2], '0')
end
return 1
