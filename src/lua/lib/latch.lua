-- The start of a release's run(), with 'count' (the owner's holds here,
-- nil: none), 'believed' (the client's count, 0: unknown), 'latch' (this
-- release's unlock latch) and 'latch_ms' (its lifetime).
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
-- It returns the first run's answer (-1 when the owner holds nothing and
-- no run answered; a latch holding no number answers nothing), or goes on
-- with 'left', the holds the owner keeps, written in the latch.
if count == nil or believed == 0 then
  local done = redis.call('get', latch)
  if done then
    done = tonumber(done)
    if done then
      return done
    end
  elseif count == nil then
    return -1
  end
end
-- One hold less than the client counts, when it counts (it knows what its
-- caller still has to release); else one less than the server's.
local left = (believed > 0 and believed or count) - 1
-- The latch is written before anything changes, so a refused write (OOM)
-- leaves the lock exactly as it was.
redis.call('set', latch, left, 'px', latch_ms)
