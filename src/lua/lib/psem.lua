-- The start of the scripts on an expirable-permit semaphore KEYS[1] (its
-- permits taken in KEYS[2]): 'now', and its free permits in 'count'.
-- Anything but a counter and a zset under these names is someone else's data.
--@include now
--@include semaphore
t = redis.call('type', KEYS[2]).ok
if t ~= 'none' and t ~= 'zset' then
  return redis.error_reply('NOTLOCK ' .. t .. " key, not a semaphore's permits")
end
