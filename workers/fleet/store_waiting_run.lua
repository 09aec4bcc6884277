-- Park a run whose WAIT outlives the worker (status waiting, deliveries reset):
-- VerdictStore.mark_waiting (workers/fleet/store.py). Runs after key_checks.lua
-- (prepended).
--
-- KEYS  1 run hash P:run:{run_id}   2 unfinished zset P:unfinished   3 recorded runs P:runs
-- ARGV  1 the encoded report   2 wake_at ISO ('' none)   3 now ISO   4 ttl, s   5 run_id
--       6 when to look for it (epoch s: the wake-up instant)
-- Returns 1 parked, 0 the run already has a verdict.
local problem = first_type_problem({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'hash'})
if problem then return conflict(problem) end
if redis.call('HEXISTS', KEYS[1], 'verdict') == 1
    or redis.call('HEXISTS', KEYS[3], ARGV[5]) == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'status', 'waiting', 'report', ARGV[1], 'wake_at', ARGV[2],
  'updated_at', ARGV[3], 'attempts', 0)
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[6], ARGV[5])
return 1
