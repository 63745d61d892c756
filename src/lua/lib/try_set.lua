-- Sets counter KEYS[1] (see counter_type.lua) to ARGV[1] only if it has
-- none, as Redisson's trySetPermits and trySetCount do, and then tells its
-- channel KEYS[2] MESSAGE. Returns 1 when set, 0 when it had one.
--@include counter_type
if t == 'string' then
  return 0
end
redis.call('set', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], MESSAGE)
return 1
