-- Acquire the write side of the read-write lock KEYS[1] for writer field
-- ARGV[2]. KEYS[2]: fencing counter. ARGV[1]: lease ms; ARGV[3]: the hold
-- count the client believes the owner has.
-- Returns {1, token, count}, {0, pttl}, or {2, 0} when the hold the
-- client believes in is gone.
-- KEYS[3] and on: unlock latches of this client whose answers are in,
-- deleted once the rest is done (see engine/release.c).
--@include numbers
local invalid = bad_numbers(1, 1, MS_MAX, 3, 0, COUNT_MAX)
if invalid then
  return invalid
end

local function run()
  local mode = redis.call('hget', KEYS[1], 'mode')
  if tonumber(ARGV[3]) > 0 and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
    -- The client believes the owner writes, but that hold is gone.
    return {2, 0}
  end
  if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'write', ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, redis.call('incr', KEYS[2]), 1}
  end
  if mode == 'write' then
    local count = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
    if count ~= nil then
      -- One more hold than the client counts (set, not incremented: a retry
      -- whose first reply was lost must not count twice).
      count = tonumber(ARGV[3]) + 1
      redis.call('hset', KEYS[1], ARGV[2], count)
      redis.call('pexpire', KEYS[1],
                 math.max(redis.call('pttl', KEYS[1]), tonumber(ARGV[1])))
      return {1, tonumber(redis.call('get', KEYS[2])) or 0, count}
    end
  end
  return {0, redis.call('pttl', KEYS[1])}
end

local LATCHES = 3
--@include run
