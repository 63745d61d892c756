-- The start of release.lua's, fair_release.lua's and write_release.lua's
-- run(): 'count' is the holds the server counts for owner field ARGV[3] on
-- the lock KEYS[1] (nil: none), and 'latch' the key of this release's
-- unlock latch. ARGV[2]: lease ms to restore while held; ARGV[4]: latch
-- lifetime ms; ARGV[5]: the hold count the client believes the owner has
-- (0: unknown).
--
-- Returns the answer of a run before (see latch.lua), or the holds left
-- when some are; else goes on, with 'left' at most 0, to free the lock.
local believed, latch_ms = tonumber(ARGV[5]), ARGV[4]
--@include latch
if left > 0 then
  redis.call('hset', KEYS[1], ARGV[3], left)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return left
end
