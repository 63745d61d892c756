-- Acquire the fair lock KEYS[1] for owner field ARGV[2], in queue order.
-- KEYS[2]: the queue (list of owner fields, head first); KEYS[3]: each
-- queued owner's deadline (zset, Unix ms); KEYS[4]: fencing counter.
-- ARGV[1]: lease ms; ARGV[3]: how long a queued owner may be absent (ms);
-- ARGV[4]: the hold count the client believes the owner has;
-- ARGV[5]: '1' to join the queue when the lock is taken, '0' not to.
-- Returns {1, token, count} when held, or {0, ms to sleep at most}.
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local wait = tonumber(ARGV[3])

-- Owners at the head whose deadline passed are gone (their process died,
-- or gave up without leaving): drop them so the queue never wedges.
while true do
  local head = redis.call('lindex', KEYS[2], 0)
  if not head then break end
  local deadline = tonumber(redis.call('zscore', KEYS[3], head))
  if deadline ~= nil and deadline > now then break end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], head)
end

local count = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
if count ~= nil then
  -- Already held by this owner: reentry, or a retry whose reply was lost.
  if count ~= tonumber(ARGV[4]) + 1 then
    count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
  end
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, tonumber(redis.call('get', KEYS[4])) or 0, count}
end

local head = redis.call('lindex', KEYS[2], 0)
if redis.call('exists', KEYS[1]) == 0 and (not head or head == ARGV[2]) then
  if head then
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], ARGV[2])
    -- Everyone behind moved up one place: one absence allowance less.
    local rest = redis.call('zrange', KEYS[3], 0, -1)
    for i = 1, #rest do
      redis.call('zincrby', KEYS[3], -wait, rest[i])
    end
  end
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, redis.call('incr', KEYS[4]), 1}
end

-- Taken (or another owner is first in line). How long to sleep at most:
-- until the lock's lease ends, or, when it is free, until the head's
-- deadline, when a vanished head would be dropped.
local sleep = redis.call('pttl', KEYS[1])
if sleep == -2 then
  sleep = tonumber(redis.call('zscore', KEYS[3], head)) - now
end
if ARGV[5] == '0' or redis.call('zscore', KEYS[3], ARGV[2]) then
  return {0, sleep}
end

-- Join the queue. The deadline is when the owner ahead of us should have
-- had its turn (or the lease end), plus the absence allowance.
local last = redis.call('lindex', KEYS[2], -1)
local start = now + math.max(sleep, 0)
if last then
  start = tonumber(redis.call('zscore', KEYS[3], last))
end
redis.call('zadd', KEYS[3], start + wait, ARGV[2])
redis.call('rpush', KEYS[2], ARGV[2])
return {0, sleep}
