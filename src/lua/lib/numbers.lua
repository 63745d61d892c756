-- Numbers first: Redis keeps what a script wrote before one of its
-- commands failed, so an argument that PEXPIRE or SET would refuse must
-- stop the script before its first write. bad_numbers takes up to four
-- triples (i, lo, hi): ARGV[i] must be an integer in lo..hi, written as
-- Redis reads integers (digits only, no leading zero). 'lo' is 0 or 1;
-- 'hi' is written as a string of digits (below). It returns the error
-- reply for the first argument that is not one, else nil.
--
-- Every call of those scripts runs this, so it is written for speed: no
-- table, no string made and no tonumber (strtod is its dearest part) unless
-- an argument is refused. Among strings of digits without a leading zero a
-- shorter one is smaller, and two of one length compare like their values,
-- so the bound is checked on the strings themselves.

-- Durations in ms: 1..dlock.h's DLOCK_DURATION_MAX_MS.
local MS_MAX = '1000000000000'
-- Hold counts: 0..2^31-2, so that one more still fits Redis's counters.
local COUNT_MAX = '2147483646'

local function bad_number(i, lo, hi)
  local s = ARGV[i]
  if s ~= nil and ((s == '0' and lo == 0) or s:find('^[1-9]%d*$')) then
    local n, m = #s, #hi
    if n < m or (n == m and s <= hi) then
      return nil
    end
  end
  return redis.error_reply('DLOCK_EINVAL ARGV[' .. i .. '] must be an ' ..
      'integer in ' .. lo .. '..' .. hi .. ', got "' ..
      (string.gsub(string.sub(tostring(s), 1, 24), '[^%w%.%-+ ]', '?')) .. '"')
end

local function bad_numbers(i1, lo1, hi1, i2, lo2, hi2, i3, lo3, hi3, i4, lo4,
                           hi4)
  return bad_number(i1, lo1, hi1) or (i2 and bad_number(i2, lo2, hi2)) or
      (i3 and bad_number(i3, lo3, hi3)) or (i4 and bad_number(i4, lo4, hi4))
end
