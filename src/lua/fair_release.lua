-- Release one hold of owner field ARGV[3] on the fair lock KEYS[1]. When
-- it becomes free, the owner at the head of the queue KEYS[2] is handed
-- the lock at once if it is a dlock waiter (it has an entry in KEYS[6],
-- "<lease>:<alive until>"): it holds it with that lease and a new token
-- from KEYS[7], and the message "grant:<token>" on channel KEYS[4] .. ':'
-- .. <head> tells it so, sparing it the round trip of taking the lock
-- itself. Any other head (a Redisson waiter) is told "0" there and takes
-- the lock itself.
-- KEYS[3]: queue deadlines (zset, Unix ms); KEYS[5]: the latch of this
-- release; KEYS[8] and on: unlock latches of this client whose answers
-- are in, deleted once the rest is done. ARGV[1]: unlock message; ARGV[2]: lease ms to
-- restore while held; ARGV[4]: latch lifetime ms; ARGV[5]: the hold count
-- the client believes the owner has (0: unknown); ARGV[6]: the allowance
-- of a queued owner (ms, see fair_acquire.lua).
-- Returns the holds left (0: now free), or -1 when the owner holds none.
--@include numbers
local invalid = bad_numbers(2, 1, MS_MAX, 4, 1, MS_MAX, 5, 0, COUNT_MAX, 6, 1, MS_MAX)
if invalid then
  return invalid
end

local function run()
  local count = tonumber(redis.call('hget', KEYS[1], ARGV[3]))
  local latch = KEYS[5]
  --@include release_hold
  redis.call('del', KEYS[1])

  -- Never hand the lock to an owner that counts as gone (see
  -- fair_acquire.lua): drop those first.
  --@include now
  local head, mine
  while true do
    head = redis.call('lindex', KEYS[2], 0)
    if not head then
      return 0
    end
    local deadline = tonumber(redis.call('zscore', KEYS[3], head))
    mine = redis.call('hget', KEYS[6], head)
    local alive = mine and tonumber(string.match(mine, ':(%d+)$')) or nil
    if deadline ~= nil and deadline > now and (alive == nil or alive > now) then
      break
    end
    redis.call('lpop', KEYS[2])
    redis.call('zrem', KEYS[3], head)
    redis.call('hdel', KEYS[6], head)
  end

  local lease = mine and tonumber(string.match(mine, '^(%d+)'))
  if not lease then
    redis.call('publish', KEYS[4] .. ':' .. head, ARGV[1])
    return 0
  end
  redis.call('lpop', KEYS[2])
  redis.call('zrem', KEYS[3], head)
  redis.call('hdel', KEYS[6], head)
  -- An acquisition, as Redisson counts them: one allowance off every
  -- queued deadline (see fair_acquire.lua).
  -- (In one ZADD per few hundred entries: the command calls, not the
  -- entries, are most of the cost.)
  local all = redis.call('zrange', KEYS[3], 0, -1, 'withscores')
  for first = 1, #all, 512 do
    local args = {}
    for i = first, math.min(first + 510, #all - 1), 2 do
      args[#args + 1] = tonumber(all[i + 1]) - tonumber(ARGV[6])
      args[#args + 1] = all[i]
    end
    redis.call('zadd', KEYS[3], unpack(args))
  end
  redis.call('hset', KEYS[1], head, 1)
  redis.call('pexpire', KEYS[1], lease)
  local token = redis.call('incr', KEYS[7])
  redis.call('publish', KEYS[4] .. ':' .. head, 'grant:' .. token)
  return 0
end

local LATCHES = 8
--@include run
