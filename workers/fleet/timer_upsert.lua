-- Add or replace a timer: TimerStore.put_many (workers/fleet/timers.py). A timer in flight
-- keeps its lease; its new entry (a fresh token) makes the claimer's ack yield to it.
--
-- KEYS  1 due P:timers:due   2 in flight P:timers:inflight   3 entries P:timers:entries
-- ARGV  1 timer id   2 entry JSON   3 due instant
-- Returns 1 added to due, 2 replaced while in flight.
local problem = types_problem(KEYS, {'zset', 'zset', 'hash'})
if problem then return conflict(problem) end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
if redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return 2
end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
return 1
