-- Put before every script in src/lua by cmake/embed_lua.cmake.
--
-- Numbers first: Redis keeps what a script wrote before one of its
-- commands failed, so an argument that PEXPIRE or SET would refuse must
-- stop the script before its first write. bad_numbers takes triples
-- (i, lo, hi): ARGV[i] must be an integer in lo..hi, written as Redis reads
-- integers (digits only, no leading zero). It returns the error reply for
-- the first argument that is not one, else nil. Durations are 1..10^12 ms
-- (dlock.h's DLOCK_DURATION_MAX_MS), hold counts 0..2^31-2.
local function bad_numbers(...)
  local spec = {...}
  for k = 1, #spec, 3 do
    local i, lo, hi = spec[k], spec[k + 1], spec[k + 2]
    local s = ARGV[i]
    local v = tonumber(s)
    -- Below 10^14 Lua writes an integer back exactly as Redis reads it, so
    -- one comparison rules out signs, leading zeros, fractions, exponents
    -- and hexadecimal; larger numbers have their digits checked.
    local ok = v ~= nil and v >= lo and v <= hi and (v ~= 0 or s == '0')
    if ok and v < 1e14 then
      ok = v % 1 == 0 and tostring(v) == s
    elseif ok then
      ok = #s <= 19 and s:match('^[1-9]%d*$') ~= nil
    end
    if not ok then
      return redis.error_reply('DLOCK_EINVAL ARGV[' .. i .. '] must be an ' ..
          'integer in ' .. string.format('%.0f', lo) .. '..' ..
          string.format('%.0f', hi) .. ', got "' ..
          (string.gsub(string.sub(tostring(s), 1, 24), '[^%w%.%-+ ]', '?')) ..
          '"')
    end
  end
  return nil
end

