-- Renews many expirable permits at once: KEYS[i] is a semaphore's permits
-- (zset "{name}:timeout"), ARGV[i + 1] a permit id in it, ARGV[1] the new
-- lease in ms. Only a permit still taken and within its lease is renewed:
-- one whose lease ended may have been taken back and handed to another
-- holder. Returns one entry per permit: 1 renewed, 0 lost.

--@include numbers
local invalid = bad_numbers(1, 1, MS_MAX)
if invalid then
  return invalid
end

--@include now
local ends = now + tonumber(ARGV[1])
local result = {}
for i = 1, #KEYS do
  result[i] = 0
  if redis.call('type', KEYS[i]).ok == 'zset' then
    local s = redis.call('zscore', KEYS[i], ARGV[i + 1])
    if s and tonumber(s) > now then
      redis.call('zadd', KEYS[i], 'xx', ends, ARGV[i + 1])
      result[i] = 1
    end
  end
end
return result
