-- Release one write hold of writer field ARGV[3] on the read-write lock
-- KEYS[1]. When the last write hold goes, every waiter is told to retry
-- (message ARGV[1], "1", on channel KEYS[2]): readers may all go now.
-- KEYS[3]: the latch of this release. ARGV[2]: lease ms to restore while
-- held; ARGV[4]: latch lifetime ms; ARGV[5]: the hold count the client
-- believes the owner has (0: unknown).
-- Returns the write holds left, or -1 for none.
-- KEYS[4] and on: unlock latches of this client whose answers are in,
-- deleted once the rest is done (see engine/release.c).
--@include numbers
local invalid = bad_numbers(2, 1, MS_MAX, 4, 1, MS_MAX, 5, 0, COUNT_MAX)
if invalid then
  return invalid
end

local function run()
  local count = nil
  if redis.call('hget', KEYS[1], 'mode') == 'write' then
    count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
  end
  -- No write hold (count nil) also when a first run took the last one and
  -- left the lock in read mode.
  local latch = KEYS[3]
  --@include release_hold
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

local LATCHES = 4
--@include run
