-- The start of a script that deletes lock KEYS[1] whoever holds it. A lock
-- is a hash: no key is no lock (the answer 0), and anything else is not
-- deleted but answered with an error reply starting with NOTLOCK.
local kind = redis.call('type', KEYS[1])['ok']
if kind == 'none' then
  return 0
end
if kind ~= 'hash' then
  return redis.error_reply('NOTLOCK the key holds a ' .. kind ..
                           ', not a lock; nothing deleted')
end
