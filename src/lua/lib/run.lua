-- Runs run(), then deletes KEYS[LATCHES] and on: this client's unlock
-- latches whose answers are in (see engine/release.c). Last, so that a write the
-- rest makes is the script's first: Redis refuses it when out of memory,
-- before anything changed, rather than let a script that has already
-- written go on.
local result = run()
for i = LATCHES, #KEYS do
  redis.call('del', KEYS[i])
end
return result
