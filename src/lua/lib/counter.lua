-- Reads a counter (see counter_type.lua), NUMBER naming what its string
-- holds: 'count' is its value, nil when the key does not exist.
--@include counter_type
local count
if t == 'string' then
  count = tonumber(redis.call('get', KEYS[1]))
  if count == nil then
    return redis.error_reply('NOTLOCK the string is not a ' .. NUMBER)
  end
end
