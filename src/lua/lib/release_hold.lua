-- One hold less of owner field ARGV[3] on lock KEYS[1], in the run() of
-- release.lua, fair_release.lua and write_release.lua ('count', 'latch':
-- see latch.lua): returns while holds are left, kept for ARGV[2] ms.
local believed, latch_ms = tonumber(ARGV[5]), ARGV[4]
--@include latch
if left > 0 then
  redis.call('hset', KEYS[1], ARGV[3], left)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return left
end
