-- Release one read hold of owner field ARGV[2] on the read-write lock
-- KEYS[1]. KEYS[2]: the lock's channel; KEYS[3]: this owner's hold-timeout
-- key prefix; KEYS[4]: the prefix of every owner's ("{name}"); KEYS[5]:
-- the latch of this release. ARGV[1]: unlock message; ARGV[3]: latch
-- lifetime ms. Returns the owner's read holds left, or -1 for none.
-- KEYS[6] and on: unlock latches of this client whose answers are in,
-- deleted once the rest is done (see engine/release.c).
--@include numbers
local invalid = bad_numbers(3, 1, MS_MAX, 4, 0, COUNT_MAX)
if invalid then
  return invalid
end

local function run()
  local count = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
  local believed, latch, latch_ms = tonumber(ARGV[4]), KEYS[5], ARGV[3]
  -- A second run with a known count also deletes no timeout key that the
  -- first run left.
  --@include latch
  if left <= 0 then
    redis.call('hdel', KEYS[1], ARGV[2])
  else
    redis.call('hset', KEYS[1], ARGV[2], left)
  end
  -- Hold n's timeout key goes with hold n (any above it belonged to a hold
  -- the server counted and the client did not).
  for n = math.max(count, left + 1), left + 1, -1 do
    redis.call('del', KEYS[3] .. ':' .. n)
  end
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
      return left
    end
    if redis.call('hget', KEYS[1], 'mode') == 'write' then
      return left
    end
  end
  redis.call('del', KEYS[1])
  redis.call('publish', KEYS[2], ARGV[1])
  return left
end

local LATCHES = 6
--@include run
