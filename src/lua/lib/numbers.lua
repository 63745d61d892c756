-- Put before every script in src/lua by cmake/embed_lua.cmake.
--
-- Numbers first: Redis keeps what a script wrote before one of its
-- commands failed, so an argument that PEXPIRE or SET would refuse must
-- stop the script before its first write. bad_numbers takes up to four
-- triples (i, lo, hi): ARGV[i] must be an integer in lo..hi, written as
-- Redis reads integers (digits only, no leading zero). It returns the error
-- reply for the first argument that is not one, else nil. Durations are
-- 1..10^12 ms (dlock.h's DLOCK_DURATION_MAX_MS), hold counts 0..2^31-2.
--
-- Every script call runs this, so it is written for speed: no table, no
-- string made unless an argument is refused (an anchored find, then
-- tonumber, costs about a third of a microsecond per call).
local function bad_number(i, lo, hi)
  local s = ARGV[i]
  if s ~= nil and #s <= 19 and (s == '0' or s:find('^[1-9]%d*$')) then
    local v = tonumber(s)
    if v >= lo and v <= hi then
      return nil
    end
  end
  return redis.error_reply('DLOCK_EINVAL ARGV[' .. i .. '] must be an ' ..
      'integer in ' .. string.format('%.0f', lo) .. '..' ..
      string.format('%.0f', hi) .. ', got "' ..
      (string.gsub(string.sub(tostring(s), 1, 24), '[^%w%.%-+ ]', '?')) .. '"')
end

local function bad_numbers(i1, lo1, hi1, i2, lo2, hi2, i3, lo3, hi3, i4, lo4,
                           hi4)
  return bad_number(i1, lo1, hi1) or (i2 and bad_number(i2, lo2, hi2)) or
      (i3 and bad_number(i3, lo3, hi3)) or (i4 and bad_number(i4, lo4, hi4))
end

