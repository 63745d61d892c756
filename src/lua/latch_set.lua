-- Sets the count of count-down latch KEYS[1] (Redisson's RCountDownLatch:
-- a string holding the count, deleted when it reaches zero) only if it has
-- none: Redisson's trySetCount. KEYS[2]: the latch's channel, told '1' (a
-- new count: Redisson's waiters close their local latch). ARGV[1]: the
-- count, 1..2^53 (Lua counts in doubles).
-- Returns 1 when set, 0 when the latch already had a count.

--@include numbers
local invalid = bad_numbers(1, 1, '9007199254740992')
if invalid then
  return invalid
end

local KIND, MESSAGE = 'count-down latch', '1'
--@include try_set
