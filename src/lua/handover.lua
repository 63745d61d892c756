-- Release the last hold of owner field ARGV[1] on the reentrant lock
-- KEYS[1] by handing the lock straight to owner field ARGV[2], a waiter of
-- the same client, with lease ARGV[3] ms and a new token from KEYS[2]. No
-- unlock message is published: the lock is never free, so no waiter
-- anywhere is woken for nothing. KEYS[3]: the latch that makes a retry
-- answer like the first run; ARGV[4]: its lifetime in ms.
--
-- With ARGV[5] = '1' (the client has handed the lock over several times in
-- a row), the lock is released for every client instead, with unlock
-- message ARGV[6] on channel KEYS[4]: other clients get their turn, those
-- that listen there and those that poll without listening (Redisson's
-- RSpinLock, a tryLock() loop), which no one can see. The answer says
-- whether another client listens, so that the releasing client knows how
-- long its own waiters should hold back.
--
-- Returns {0, token} when handed over, {-1, 0} when ARGV[1] holds none,
-- and when released for everyone: {1, 0} when another client listens,
-- {3, 0} when none does, {2, 0} when unknown (the user may not run PUBSUB
-- NUMSUB).
-- KEYS[5] and on: unlock latches of this client whose answers are in,
-- deleted once the rest is done (see engine/release.c).
--@include numbers
local invalid = bad_numbers(3, 1, MS_MAX, 4, 1, MS_MAX)
if invalid then
  return invalid
end

local function run()
  -- The latch matters only once the owner holds nothing here: every first
  -- run that answered took its hold away. So a hand-over of a held lock
  -- does not read it.
  if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
    local done = redis.call('get', KEYS[3])
    if done == 'others' then
      return {1, 0}
    elseif done == 'unknown' then
      return {2, 0}
    elseif done == 'alone' then
      return {3, 0}
    elseif done then
      return {0, tonumber(done)}
    end
    return {-1, 0}
  end
  if ARGV[5] == '1' then
    -- pcall: a user without the PUBSUB command still releases, as before.
    local numsub = redis.pcall('pubsub', 'numsub', KEYS[4])
    local listening = nil
    if type(numsub) == 'table' then
      listening = tonumber(numsub[2])
    end
    local what, answer = 'unknown', 2
    if listening ~= nil and listening > 1 then
      what, answer = 'others', 1
    elseif listening ~= nil then
      what, answer = 'alone', 3
    end
    redis.call('set', KEYS[3], what, 'px', ARGV[4])
    redis.call('del', KEYS[1])
    redis.call('publish', KEYS[4], ARGV[6])
    return {answer, 0}
  end
  local token = redis.call('incr', KEYS[2])
  redis.call('set', KEYS[3], token, 'px', ARGV[4])
  redis.call('del', KEYS[1])
  redis.call('hset', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[3])
  return {0, token}
end

local LATCHES = 5
--@include run
