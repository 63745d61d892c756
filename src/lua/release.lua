-- Release one hold of owner field ARGV[3] on the reentrant lock KEYS[1].
-- KEYS[2]: channel told when the lock becomes free; KEYS[3]: the latch
-- that makes a retried release return the first answer instead of
-- releasing twice. ARGV[1]: unlock message; ARGV[2]: lease in ms to restore
-- while still held; ARGV[4]: latch lifetime in ms; ARGV[5]: the hold count
-- the client believes the owner has (0: unknown).
-- Returns the holds left (0: now free), or -1 when the owner holds none.
-- KEYS[4] and on: unlock latches of this client whose answers are in,
-- deleted once the rest is done (see engine/release.c).
--@include numbers
local invalid = bad_numbers(2, 1, MS_MAX, 4, 1, MS_MAX, 5, 0, COUNT_MAX)
if invalid then
  return invalid
end

local function run()
  local count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
  local latch = KEYS[3]
  --@include release_hold
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], ARGV[1])
  return left
end

local LATCHES = 4
--@include run
