-- Release one hold of owner field ARGV[3] on the fair lock KEYS[1]; when it
-- becomes free, tell only the owner at the head of the queue KEYS[2], on
-- channel KEYS[4] .. ':' .. <head>. KEYS[3]: queue deadlines; KEYS[5]: the
-- latch of this release. ARGV[1]: unlock message; ARGV[2]: lease ms to
-- restore while held; ARGV[4]: latch lifetime ms.
-- Returns the holds left (0: now free), or -1 when the owner holds none.
local done = redis.call('get', KEYS[5])
if done then
  return tonumber(done)
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
if count == nil then
  return -1
end
redis.call('set', KEYS[5], count - 1, 'px', ARGV[4])
if count > 1 then
  redis.call('hincrby', KEYS[1], ARGV[3], -1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return count - 1
end
redis.call('del', KEYS[1])
local head = redis.call('lindex', KEYS[2], 0)
if head then
  redis.call('publish', KEYS[4] .. ':' .. head, ARGV[1])
end
return 0
