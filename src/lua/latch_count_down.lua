-- Counts count-down latch KEYS[1] down by one; at zero the key goes and
-- KEYS[2], the latch's channel, is told '0', which wakes every waiter
-- (Redisson's countDown). A latch that has no count (never set, or at zero
-- already) is left alone: the count never goes below zero here.
-- Returns the count left, or -1 when there was none.

local KIND, NUMBER = 'count-down latch', 'count'
--@include counter
if count == nil or count <= 0 then
  return -1
end
local left = redis.call('incrby', KEYS[1], -1)
if left <= 0 then
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], '0')
end
return left
