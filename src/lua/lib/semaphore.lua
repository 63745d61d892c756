-- Reads semaphore KEYS[1] (a string holding the number of free permits):
-- 'count', nil when none are set.
local KIND, NUMBER = 'semaphore', 'number of permits'
--@include counter
