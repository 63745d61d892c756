-- Delete the fair lock KEYS[1] whoever holds it, and tell the owner at the
-- head of the queue KEYS[2] (channel KEYS[3] .. ':' .. <head>).
-- Returns 1 when there was a lock, else 0.
if redis.call('del', KEYS[1]) == 0 then
  return 0
end
local head = redis.call('lindex', KEYS[2], 0)
if head then
  redis.call('publish', KEYS[3] .. ':' .. head, '0')
end
return 1
