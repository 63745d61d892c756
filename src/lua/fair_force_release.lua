-- Delete the fair lock KEYS[1] whoever holds it, and tell the owner at the
-- head of the queue KEYS[2] (channel KEYS[3] .. ':' .. <head>).
-- Returns 1 when there was a lock, else 0. When the key holds anything but
-- a fair (or reentrant: the layout is the same) lock, nothing is deleted
-- and the reply is an error starting with NOTLOCK, as in
-- force_release.lua.
--@include lock_type
local fields = redis.call('hgetall', KEYS[1])
for i = 1, #fields, 2 do
  local field, value = fields[i], fields[i + 1]
  if field == 'mode' then
    return redis.error_reply('NOTLOCK the key is a read-write lock, not ' ..
                             'a fair one; nothing deleted')
  end
  if not string.find(field, ':', 1, true) or not tonumber(value) then
    return redis.error_reply('NOTLOCK the key is a hash that is not a ' ..
                             'lock; nothing deleted')
  end
end
redis.call('del', KEYS[1])
local head = redis.call('lindex', KEYS[2], 0)
if head then
  redis.call('publish', KEYS[3] .. ':' .. head, '0')
end
return 1
