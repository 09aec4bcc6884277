-- Count one delivery of a run to a worker: VerdictStore.begin_delivery
-- (workers/fleet/store.py). Runs after key_checks.lua (prepended).
--
-- KEYS  1 run hash P:run:{run_id}   2 unfinished zset P:unfinished   3 recorded runs P:runs
-- ARGV  1 run_id   2 check_id   3 target   4 now ISO   5 ttl, s   6 now, epoch s
-- Returns -1 when the run already has a verdict, else this delivery's number.
local problem = first_type_problem({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'hash'})
  or integer_problem(KEYS[1], 'attempts')
if problem then return conflict(problem) end
if redis.call('HEXISTS', KEYS[1], 'verdict') == 1
    or redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  return -1
end
local n = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('HSETNX', KEYS[1], 'run_id', ARGV[1])
redis.call('HSETNX', KEYS[1], 'check_id', ARGV[2])
redis.call('HSETNX', KEYS[1], 'target', ARGV[3])
redis.call('HSET', KEYS[1], 'status', 'running', 'updated_at', ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
redis.call('ZADD', KEYS[2], ARGV[6], ARGV[1])
return n
