-- Drop this owner's marker after a failed send, so a retry may try again at once:
-- TimerStore.abandon_enqueue (workers/fleet/timers.py). Another owner's marker, or 'sent',
-- stays.
--
-- KEYS  1 the fire's marker P:enqueued:{fire}
-- ARGV  1 owner
-- Returns 1 dropped, 0 not ours.
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, string.len(ARGV[1]) + 1) == ARGV[1] .. '|' then
  return redis.call('DEL', KEYS[1])
end
return 0
