-- Release one write hold of writer field ARGV[3] on the read-write lock
-- KEYS[1]. When the last write hold goes, every waiter is told to retry
-- (message ARGV[1], "1", on channel KEYS[2]): readers may all go now.
-- KEYS[3]: the latch of this release. ARGV[2]: lease ms to restore while
-- held; ARGV[4]: latch lifetime ms; ARGV[5]: the hold count the client
-- believes the owner has (0: unknown).
-- Returns the write holds left, or -1 for none.
-- KEYS[4] and on: unlock latches of this client whose answers are in,
-- deleted once the rest is done (see hashlock.c).
local invalid = bad_numbers(2, 1, MS_MAX, 4, 1, MS_MAX, 5, 0, COUNT_MAX)
if invalid then
  return invalid
end

local function run()
  local count = nil
  if redis.call('hget', KEYS[1], 'mode') == 'write' then
    count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
  end
  local believed = tonumber(ARGV[5])
  -- No write hold (count nil) also when a first run took the last one and
  -- left the lock in read mode.
  local answer = latched_answer(count, believed, KEYS[3])
  if answer then
    return answer
  end
  -- One hold less than the client counts (ARGV[5], 0: unknown).
  local left = (believed > 0 and believed or count) - 1
  redis.call('set', KEYS[3], left, 'px', ARGV[4])
  if left > 0 then
    redis.call('hset', KEYS[1], ARGV[3], left)
    redis.call('pexpire', KEYS[1], ARGV[2])
    return left
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
end

-- Last, so that a write the rest makes is the script's first: Redis refuses
-- it when out of memory, before anything changed, rather than let a
-- script that has already written go on.
local result = run()
for i = 4, #KEYS do
  redis.call('del', KEYS[i])
end
return result
