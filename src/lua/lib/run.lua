-- The end of the scripts that do their work in run() and are also given
-- the unlock latches of this client whose answers are in, KEYS[LATCHES] and
-- on, to delete once the rest is done (see hashlock.c).
--
-- Last, so that a write the rest makes is the script's first: Redis refuses
-- it when out of memory, before anything changed, rather than let a
-- script that has already written go on.
local result = run()
for i = LATCHES, #KEYS do
  redis.call('del', KEYS[i])
end
return result
