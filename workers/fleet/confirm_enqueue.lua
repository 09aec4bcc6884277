-- Right before a send: TimerStore.confirm_enqueue (workers/fleet/timers.py). Is the fire's
-- marker still this owner's, with this fencing token? Then hold it again from now; else
-- (taken over, sent by another, abandoned) the send must not happen.
--
-- KEYS  1 the fire's marker P:enqueued:{fire}
-- ARGV  1 owner   2 fencing token   3 hold until   4 the marker's TTL, s
-- Returns 1 still ours, 0 lost.
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
local owner, token = string.match(current, '^([^|]*)|[%d%.]+|(%w+)$')
if owner ~= ARGV[1] or token ~= ARGV[2] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[3] .. '|' .. ARGV[2], 'EX', ARGV[4])
return 1
