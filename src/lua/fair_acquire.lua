-- Acquire the fair lock KEYS[1] for owner field ARGV[2], in queue order.
-- KEYS[2]: the queue (list of owner fields, head first); KEYS[3]: each
-- queued owner's deadline (zset, Unix ms); KEYS[4]: fencing counter;
-- KEYS[5]: the lock's channel, to which ':' .. <owner> is added to tell
-- one waiter it is its turn; KEYS[6]: what dlock knows of its own queued
-- owners (hash: owner -> "<lease>:<alive until>", see below). KEYS[7] and
-- on: unlock latches of this client whose answers are in, deleted once
-- the rest is done (see engine/release.c).
-- ARGV[1]: lease ms; ARGV[3]: how long a queued owner may stay silent
-- before it counts as gone (ms), also the step between chained deadlines;
-- ARGV[4]: the hold count the client believes the owner has; ARGV[5]: '1'
-- to join the queue when the lock is taken, '0' not to.
-- Returns {1, token, count} when held, {0, ms to sleep at most, fencing
-- counter}, or {2, 0} when the hold the client believes in is gone. The
-- counter lets the owner tell a hand-over message sent after this attempt
-- (its token is higher) from one sent before it and only now delivered.
--
-- The deadlines are kept as Redisson's fair lock keeps them, since its
-- scripts work on the same zset: a new waiter's deadline is the last
-- waiter's plus the allowance (or the lock's remaining lease plus the
-- allowance for the first), and every acquisition takes one allowance off
-- every queued deadline. A deadline written any other way falls into the
-- past after a Redisson acquisition, and Redisson's scripts then drop a
-- live waiter. Redisson's scripts judge a waiter by its deadline only;
-- dlock's also by the waiter's own sign of life in KEYS[6], so that a
-- dlock waiter that died is dropped one allowance after it last tried,
-- however far in the future the chain put its deadline.
--@include numbers
local invalid = bad_numbers(1, 1, MS_MAX, 3, 1, MS_MAX, 4, 0, COUNT_MAX)
if invalid then
  return invalid
end

local function run()
  --@include now
  local wait = tonumber(ARGV[3])

  -- Gone: its deadline passed, or it is a dlock waiter silent for longer
  -- than its allowance (its process died without leaving the queue).
  local function gone(owner)
    local deadline = tonumber(redis.call('zscore', KEYS[3], owner))
    if deadline == nil or deadline <= now then
      return true
    end
    local mine = redis.call('hget', KEYS[6], owner)
    local alive = mine and tonumber(string.match(mine, ':(%d+)$')) or nil
    return alive ~= nil and alive <= now
  end

  -- Takes one allowance off every queued deadline (an acquisition).
  -- (Rewritten in one ZADD per few hundred entries: the command calls, not
  -- the entries, are most of the cost.)
  local function advance()
    local all = redis.call('zrange', KEYS[3], 0, -1, 'withscores')
    for first = 1, #all, 512 do
      local args = {}
      for i = first, math.min(first + 510, #all - 1), 2 do
        args[#args + 1] = tonumber(all[i + 1]) - wait
        args[#args + 1] = all[i]
      end
      redis.call('zadd', KEYS[3], unpack(args))
    end
  end

  -- Owners at the head that are gone are dropped so the queue never wedges.
  -- No other deadline changes: the next one was chained one allowance after
  -- the dropped one's.
  local dropped = false
  while true do
    local head = redis.call('lindex', KEYS[2], 0)
    if not head or not gone(head) then break end
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], head)
    redis.call('hdel', KEYS[6], head)
    dropped = true
  end

  local count = tonumber(redis.call('hget', KEYS[1], ARGV[2]))
  if count == nil and tonumber(ARGV[4]) > 0 then
    -- The client believes the owner holds it, but the hold is gone.
    return {2, 0}
  end
  if count ~= nil then
    -- Already held by this owner: one more hold than the client counts (set,
    -- so a retry whose first reply was lost does not count twice). With no
    -- hold counted, this is the lock handed over by a release whose message
    -- the owner missed, and its token is the latest.
    count = tonumber(ARGV[4]) + 1
    redis.call('hset', KEYS[1], ARGV[2], count)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, tonumber(redis.call('get', KEYS[4])) or 0, count}
  end

  local head = redis.call('lindex', KEYS[2], 0)
  local free = redis.call('exists', KEYS[1]) == 0
  if free and (not head or head == ARGV[2]) then
    if head then
      redis.call('lpop', KEYS[2])
      redis.call('zrem', KEYS[3], ARGV[2])
      redis.call('hdel', KEYS[6], ARGV[2])
      advance()
    end
    redis.call('hset', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {1, redis.call('incr', KEYS[4]), 1}
  end
  if free and dropped then
    -- The lock is free and the new head was never told: tell it now.
    redis.call('publish', KEYS[5] .. ':' .. head, '0')
  end

  -- Taken, or another owner is first in line. Sleep until the lock's lease
  -- ends at most, and never longer than a third of the allowance, so that a
  -- queued owner shows it is alive well before its allowance runs out.
  local sleep = redis.call('pttl', KEYS[1])
  local beat = math.floor(wait / 3)
  if sleep < 0 or sleep > beat then
    sleep = beat
  end
  local queued = redis.call('zscore', KEYS[3], ARGV[2])
  if ARGV[5] == '0' and not queued then
    return {0, sleep, tonumber(redis.call('get', KEYS[4])) or 0}
  end
  if queued then
    -- A sign of life. The waiter's deadline is kept at least one allowance
    -- past the one ahead of it (now, at the head), and the deadlines behind
    -- it follow, so that the chain stays as Redisson's scripts expect while
    -- a long hold passes: a waiter keeps its place however long it waits.
    local queue = redis.call('lrange', KEYS[2], 0, -1)
    local at = 1
    while at <= #queue and queue[at] ~= ARGV[2] do
      at = at + 1
    end
    local floor = now
    if at > 1 and at <= #queue then
      floor = math.max(tonumber(redis.call('zscore', KEYS[3], queue[at - 1]))
                       or now, now)
    end
    -- The waiter, then those behind it: each moved only as far as the
    -- chain needs, and no further once one needs nothing.
    for i = at, #queue do
      floor = floor + wait
      local score = tonumber(redis.call('zscore', KEYS[3], queue[i]))
      if score ~= nil and score >= floor then break end
      redis.call('zadd', KEYS[3], floor, queue[i])
    end
  else
    -- A newcomer: chained after the last waiter, or after the lock's lease.
    local tail = redis.call('lindex', KEYS[2], -1)
    local base = now + math.max(redis.call('pttl', KEYS[1]), 0)
    local last = tail and tonumber(redis.call('zscore', KEYS[3], tail)) or nil
    if last ~= nil and last > base then
      base = last
    end
    redis.call('zadd', KEYS[3], base + wait, ARGV[2])
    redis.call('rpush', KEYS[2], ARGV[2])
  end
  -- A release may hand this owner the lock directly (it waits on its own
  -- channel for word of it), rather than wake it to come and take it. The
  -- lease it is handed is cut to the allowance, as an owner that does not
  -- take up the lock is no more alive than a silent waiter. The hash lives
  -- as long as the longest-lived dlock waiter could.
  redis.call('hset', KEYS[6], ARGV[2],
             math.min(tonumber(ARGV[1]), wait) .. ':' .. (now + wait))
  if redis.call('pttl', KEYS[6]) < 2 * wait then
    redis.call('pexpire', KEYS[6], 2 * wait)
  end
  return {0, sleep, tonumber(redis.call('get', KEYS[4])) or 0}
end

local LATCHES = 7
--@include run
