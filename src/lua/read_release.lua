-- Release one read hold of owner field ARGV[2] on the read-write lock
-- KEYS[1]. KEYS[2]: the lock's channel; KEYS[3]: this owner's hold-timeout
-- key prefix; KEYS[4]: the prefix of every owner's ("{name}"); KEYS[5]:
-- the latch of this release. ARGV[1]: unlock message; ARGV[3]: latch
-- lifetime ms. Returns the owner's read holds left, or -1 for none.
local done = redis.call('get', KEYS[5])
if done then
  return tonumber(done)
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
if count == nil then
  return -1
end
redis.call('set', KEYS[5], count - 1, 'px', ARGV[3])
if count == 1 then
  redis.call('hdel', KEYS[1], ARGV[2])
else
  redis.call('hincrby', KEYS[1], ARGV[2], -1)
end
redis.call('del', KEYS[3] .. ':' .. count)
if redis.call('hlen', KEYS[1]) > 1 then
  -- Other holds remain: the lock lives as long as the longest of them.
  local longest = -3
  for _, field in ipairs(redis.call('hkeys', KEYS[1])) do
    local n = tonumber(redis.call('hget', KEYS[1], field))
    if n then
      for i = n, 1, -1 do
        local key = KEYS[4] .. ':' .. field .. ':rwlock_timeout:' .. i
        longest = math.max(longest, redis.call('pttl', key))
      end
    end
  end
  if longest > 0 then
    redis.call('pexpire', KEYS[1], longest)
    return count - 1
  end
  if redis.call('hget', KEYS[1], 'mode') == 'write' then
    return count - 1
  end
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return count - 1
