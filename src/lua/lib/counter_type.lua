-- For a counter KEYS[1] (a string holding an integer: a semaphore, a
-- count-down latch), KIND naming what it is: 't' is the key's type, and
-- anything but a string under the name is someone else's data.
local t = redis.call('type', KEYS[1]).ok
if t ~= 'none' and t ~= 'string' then
  return redis.error_reply('NOTLOCK ' .. t .. ' key, not a ' .. KIND)
end
