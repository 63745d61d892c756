-- Counts the permits of the expirable-permit semaphore KEYS[1] (see
-- psem_acquire.lua) after taking back those whose lease ended. KEYS[2]:
-- the permits taken; KEYS[3]: the channel.
-- Returns {free permits (-1: none set), permits taken}.

--@include psem
--@include psem_reclaim
local free = tonumber(redis.call('get', KEYS[1]))
return {free == nil and -1 or free, redis.call('zcard', KEYS[2])}
