-- Delete the lock KEYS[1] whoever holds it, and tell waiters on channel
-- KEYS[2] with message ARGV[1]. ARGV[2] names the kind of lock the caller
-- means: 'rw' for a read-write lock, anything else for an exclusive one
-- (reentrant, spin).
-- Returns 1 when there was a lock, 0 when there was none. When the key
-- holds anything else (another type, a hash that is not a lock, a lock of
-- the other kind) nothing is deleted and the reply is an error starting
-- with NOTLOCK: the check and the deletion are one atomic step, so no
-- value can take the lock's place in between.
--@include lock_type
-- A lock's hash maps owner fields "<client-id>:<owner>" (a writer's with
-- ":write" after it) to hold counts; a read-write lock also has 'mode'.
local mode = false
local fields = redis.call('hgetall', KEYS[1])
for i = 1, #fields, 2 do
  local field, value = fields[i], fields[i + 1]
  if field == 'mode' then
    mode = value
  elseif not string.find(field, ':', 1, true) or not tonumber(value) then
    return redis.error_reply('NOTLOCK the key is a hash that is not a ' ..
                             'lock; nothing deleted')
  end
end
if ARGV[2] == 'rw' then
  if mode ~= 'read' and mode ~= 'write' then
    return redis.error_reply('NOTLOCK the key is not a read-write lock ' ..
                             '(no read or write mode); nothing deleted')
  end
elseif mode then
  return redis.error_reply('NOTLOCK the key is a read-write lock, not an ' ..
                           'exclusive one; nothing deleted')
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 1
