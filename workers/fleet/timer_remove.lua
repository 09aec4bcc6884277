-- Remove a timer wherever it is: TimerStore.remove (workers/fleet/timers.py).
--
-- KEYS  1 due P:timers:due   2 in flight P:timers:inflight   3 entries P:timers:entries
-- ARGV  1 timer id
-- Returns how many of due / in flight held it.
local problem = types_problem(KEYS, {'zset', 'zset', 'hash'})
if problem then return conflict(problem) end
local n = redis.call('ZREM', KEYS[1], ARGV[1]) + redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
return n
