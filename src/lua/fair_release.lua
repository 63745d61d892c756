-- Release one hold of owner field ARGV[3] on the fair lock KEYS[1]; when it
-- becomes free, tell only the owner at the head of the queue KEYS[2], on
-- channel KEYS[4] .. ':' .. <head>. KEYS[3]: queue deadlines; KEYS[5]: the
-- latch of this release. ARGV[1]: unlock message; ARGV[2]: lease ms to
-- restore while held; ARGV[4]: latch lifetime ms; ARGV[5]: the hold
-- count the client believes the owner has (0: unknown).
-- Returns the holds left (0: now free), or -1 when the owner holds none.
local done = redis.call('get', KEYS[5])
if done then
  return tonumber(done)
end
local count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
if count == nil then
  return -1
end
-- One hold less than the client counts (ARGV[5], 0: unknown).
local left = tonumber(ARGV[5])
left = (left > 0 and left or count) - 1
redis.call('set', KEYS[5], left, 'px', ARGV[4])
if left > 0 then
  redis.call('hset', KEYS[1], ARGV[3], left)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return left
end
redis.call('del', KEYS[1])
local head = redis.call('lindex', KEYS[2], 0)
if head then
  redis.call('publish', KEYS[4] .. ':' .. head, ARGV[1])
end
return 0
