-- Register a run before its task is sent (queued; counted in its batch):
-- VerdictStore.register_runs (workers/fleet/store.py). Runs after key_checks.lua
-- (prepended).
--
-- KEYS  1 run hash P:run:{run_id}   2 batch hash P:batch:{batch_id}
--       3 batch runs list P:batch:{batch_id}:runs   (2 and 3 placeholders without a batch)
--       4 unfinished zset P:unfinished   5 recorded runs P:runs
-- ARGV  1 run_id   2 check_id   3 target   4 batch_id ('' none)   5 request JSON
--       6 now ISO   7 ttl, s   8 when to look for it (epoch s)
-- Returns 1 registered, 0 registered (or recorded) before, 2 refused: its batch was closed as
-- incomplete (its fan-out stopped), so the batch's total stays what it was when it was closed.
local problem = first_type_problem({KEYS[1], 'hash', KEYS[4], 'zset', KEYS[5], 'hash'})
if not problem and ARGV[4] ~= '' then
  problem = first_type_problem({KEYS[2], 'hash', KEYS[3], 'list'})
    or integer_problem(KEYS[2], 'total') or integer_problem(KEYS[2], 'pending')
end
if problem then return conflict(problem) end
if redis.call('HEXISTS', KEYS[1], 'queued_at') == 1
    or redis.call('HEXISTS', KEYS[1], 'verdict') == 1
    or redis.call('HEXISTS', KEYS[5], ARGV[1]) == 1 then
  return 0
end
if ARGV[4] ~= '' and redis.call('HGET', KEYS[2], 'incomplete') == '1' then
  return 2
end
redis.call('HSET', KEYS[1], 'run_id', ARGV[1], 'check_id', ARGV[2], 'target', ARGV[3],
  'batch_id', ARGV[4], 'request', ARGV[5], 'queued_at', ARGV[6], 'updated_at', ARGV[6])
if redis.call('HEXISTS', KEYS[1], 'status') == 0 then
  redis.call('HSET', KEYS[1], 'status', 'queued', 'attempts', 0)
end
redis.call('EXPIRE', KEYS[1], ARGV[7])
redis.call('ZADD', KEYS[4], ARGV[8], ARGV[1])
if ARGV[4] ~= '' then
  local length = redis.call('RPUSH', KEYS[3], ARGV[1])
  redis.call('HSET', KEYS[1], 'batch_pos', length - 1)  -- where its row will go
  redis.call('HINCRBY', KEYS[2], 'total', 1)
  redis.call('HINCRBY', KEYS[2], 'pending', 1)
  redis.call('EXPIRE', KEYS[2], ARGV[7])
  redis.call('EXPIRE', KEYS[3], ARGV[7])
end
return 1
