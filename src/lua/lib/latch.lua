-- Put before every script in src/lua by cmake/embed_lua.cmake.
--
-- A release writes its answer in an unlock latch before it changes
-- anything, so that a copy of it sent again (its reply was lost) answers
-- like the first run instead of releasing twice. The latch can change the
-- answer only when the owner holds nothing here any more ('count' nil: a
-- first run may have taken the last hold) or when the client does not know
-- its count ('believed' 0: a first run's decrement would be made twice).
-- With a known count a second run sets the very count the first one set,
-- so the release of a held lock does not read the latch at all.
--
-- Returns the answer the release gives now (the first run's, or -1 when
-- the owner holds nothing and no run answered before), or nil when it goes
-- on with its work.
local function latched_answer(count, believed, latch)
  if count ~= nil and believed ~= 0 then
    return nil
  end
  local done = redis.call('get', latch)
  if done then
    return tonumber(done)
  end
  if count == nil then
    return -1
  end
  return nil
end
