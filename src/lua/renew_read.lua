-- Renew many read holds at once. For lock i, KEYS[2i-1] is the lock,
-- KEYS[2i] its key prefix ("{name}"), ARGV[i + 1] the owner field, and
-- ARGV[1] the lease in ms. A held lock gets its lease back, and so do the
-- owner's own read holds' timeout keys, and no one else's: another owner's
-- hold (a Redisson reader with a lease, a dlock reader whose watchdog
-- stopped) ends with its own lease, as Redisson's renewal also leaves
-- them. Returns one entry per lock: 1 renewed, 0 no longer held.
--@include numbers
local invalid = bad_numbers(1, 1, MS_MAX)
if invalid then
  return invalid
end

local result = {}
for i = 1, #KEYS / 2 do
  local lock, prefix, owner = KEYS[2 * i - 1], KEYS[2 * i], ARGV[i + 1]
  local n = tonumber(redis.call('hget', lock, owner))
  if n then
    -- Never shorter than it is: another reader's hold may be longer.
    redis.call('pexpire', lock,
               math.max(redis.call('pttl', lock), tonumber(ARGV[1])))
    for k = n, 1, -1 do
      redis.call('pexpire', prefix .. ':' .. owner .. ':rwlock_timeout:' .. k,
                 ARGV[1])
    end
    result[i] = 1
  else
    result[i] = 0
  end
end
return result
