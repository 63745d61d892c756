-- Acquire the read side of the read-write lock KEYS[1] for owner field
-- ARGV[2]. Each read hold n gets its own key KEYS[2] .. ':' .. n with its
-- own lease, so the lock can live exactly as long as its longest hold.
-- KEYS[3]: fencing counter. ARGV[1]: lease ms; ARGV[3]: the owner's writer
-- field (a writer may also read); ARGV[4]: the hold count the client
-- believes the owner has. Returns {1, token, count}, {0, pttl}, or {2, 0}
-- when the hold the client believes in is gone.
-- KEYS[4] and on: unlock latches of this client whose answers are in,
-- deleted once the rest is done (see engine/release.c).
--@include numbers
local invalid = bad_numbers(1, 1, MS_MAX, 4, 0, COUNT_MAX)
if invalid then
  return invalid
end

local function run()
  local mode = redis.call('hget', KEYS[1], 'mode')
  local count = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
  if count == nil and tonumber(ARGV[4]) > 0 then
    -- The client believes the owner reads, but that hold is gone.
    return {2, 0}
  end
  if mode == false then
    redis.call('hset', KEYS[1], 'mode', 'read', ARGV[2], 1)
    redis.call('set', KEYS[2] .. ':1', 1, 'px', ARGV[1])
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, redis.call('incr', KEYS[3]), 1}
  end
  if mode == 'read' or redis.call('hexists', KEYS[1], ARGV[3]) == 1 then
    -- One more hold than the client counts (set, so a retry whose first
    -- reply was lost does not count twice).
    count = tonumber(ARGV[4]) + 1
    redis.call('hset', KEYS[1], ARGV[2], count)
    redis.call('set', KEYS[2] .. ':' .. count, 1, 'px', ARGV[1])
    local left = redis.call('pttl', KEYS[1])
    redis.call('pexpire', KEYS[1], math.max(left, tonumber(ARGV[1])))
    return {1, tonumber(redis.call('get', KEYS[3])) or 0, count}
  end
  return {0, redis.call('pttl', KEYS[1])}
end

local LATCHES = 4
--@include run
