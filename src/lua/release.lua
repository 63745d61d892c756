-- Release one hold of owner field ARGV[3] on the reentrant lock KEYS[1].
-- KEYS[2]: channel told when the lock becomes free; KEYS[3]: the latch
-- that makes a retried release return the first answer instead of
-- releasing twice. ARGV[1]: unlock message; ARGV[2]: lease in ms to restore
-- while still held; ARGV[4]: latch lifetime in ms; ARGV[5]: the hold count
-- the client believes the owner has (0: unknown).
-- Returns the holds left (0: now free), or -1 when the owner holds none.
-- KEYS[4] and on: unlock latches of this client whose answers are in,
-- deleted once the rest is done (see hashlock.c).
local invalid = bad_numbers(2, 1, MS_MAX, 4, 1, MS_MAX, 5, 0, COUNT_MAX)
if invalid then
  return invalid
end

local function run()
  local count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
  local believed = tonumber(ARGV[5])
  local answer = latched_answer(count, believed, KEYS[3])
  if answer then
    return answer
  end
  -- One hold less than the client counts, when it counts (it knows what its
  -- caller still has to release); else one less than the server's.
  local left = (believed > 0 and believed or count) - 1
  -- The latch is written before anything changes, so a refused write (OOM)
  -- leaves the lock exactly as it was.
  redis.call('set', KEYS[3], left, 'px', ARGV[4])
  if left > 0 then
    redis.call('hset', KEYS[1], ARGV[3], left)
    redis.call('pexpire', KEYS[1], ARGV[2])
  else
    redis.call('del', KEYS[1])
    redis.call('publish', KEYS[2], ARGV[1])
  end
  return left
end

-- Last, so that a write the rest makes is the script's first: Redis refuses
-- it when out of memory, before anything changed, rather than let a
-- script that has already written go on.
local result = run()
for i = 4, #KEYS do
  redis.call('del', KEYS[i])
end
return result
