-- Acquire the reentrant lock KEYS[1] for owner field ARGV[2].
-- KEYS[2]: fencing counter. ARGV[1]: lease in ms. ARGV[3]: the hold count
-- the client believes the owner has (0 when it believes it holds none);
-- the owner's count becomes that plus one.
-- Returns {1, token, count} when held by the owner afterwards,
-- {0, pttl} when another owner holds it, or {2, 0} when the hold the
-- client believes in is gone.
-- KEYS[3] and on: unlock latches of this client whose answers are in,
-- deleted once the rest is done (see engine/release.c).
--@include numbers
local invalid = bad_numbers(1, 1, MS_MAX, 3, 0, COUNT_MAX)
if invalid then
  return invalid
end

-- ARGV[3] passed the check above, so '0' is its only way to say none.
local believes_held = ARGV[3] ~= '0'

local function run()
  -- A free lock is the common case: one PTTL tells it (-2: no such key)
  -- without asking for the owner's field first, and it is the answer to
  -- give when another owner holds the lock, so that case costs no third
  -- command either.
  local ttl = redis.call('pttl', KEYS[1])
  if ttl == -2 then
    if believes_held then
      -- The client believes the owner holds it, but its hold expired or was
      -- deleted: report that rather than quietly start a new hold.
      return {2, 0}
    end
    -- Free: a new hold, and the only place a new fencing token is issued.
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, redis.call('incr', KEYS[2]), 1}
  end
  local count = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
  if count == nil then
    if believes_held then
      return {2, 0}
    end
    return {0, ttl}
  end
  -- Held by this owner already: one more hold than the client counts. Set,
  -- not incremented, so that an earlier try whose reply was lost (and may or
  -- may not have run) cannot leave the server counting one hold more than
  -- the caller will ever release.
  count = tonumber(ARGV[3]) + 1
  redis.call('hset', KEYS[1], ARGV[2], count)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {1, tonumber(redis.call('get', KEYS[2])) or 0, count}
end

local LATCHES = 3
--@include run
