-- Give a claimed timer back before its lease ends: TimerStore.release
-- (workers/fleet/timers.py).
--
-- KEYS  1 in flight P:timers:inflight   2 due P:timers:due   3 entries P:timers:entries
-- ARGV  1 timer id   2 due again at
-- Returns 1 released, 0 it was not in flight.
local problem = types_problem(KEYS, {'zset', 'zset', 'hash'})
if problem then return conflict(problem) end
if redis.call('ZREM', KEYS[1], ARGV[1]) == 0 then
  return 0
end
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
end
return 1
