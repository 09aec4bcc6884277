-- Make a batch's record and its fan-out's lease together: VerdictStore.create_batch
-- (workers/fleet/store.py), so there is never a batch marked as leased without its lease.
-- Batches past their TTL leave the batches zset as a new one enters it. Runs after
-- key_checks.lua (prepended).
--
-- KEYS  1 batch hash P:batch:{batch_id}   2 batches zset P:batches
--       3 fan-out lease P:batch:{batch_id}:fanout
-- ARGV  1 batch_id   2 kind   3 text   4 created ISO   5 created ms   6 ttl, s
--       7 lease token ('' = no lease)   8 lease ms
--       9 the creation ms before which batches have expired
-- Returns 1 created, 0 it existed already (nothing changed).
local problem = first_type_problem({KEYS[1], 'hash', KEYS[2], 'zset', KEYS[3], 'string'})
if problem then return conflict(problem) end
if redis.call('EXISTS', KEYS[1]) == 1 and redis.call('HEXISTS', KEYS[1], 'created_at') == 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'batch_id', ARGV[1], 'kind', ARGV[2], 'text', ARGV[3],
  'created_at', ARGV[4], 'sealed', '0')
for _, field in ipairs({'total', 'pending', 'true', 'false', 'poorly_posed', 'cannot_determine'}) do
  redis.call('HSETNX', KEYS[1], field, 0)
end
if ARGV[7] ~= '' then
  redis.call('HSET', KEYS[1], 'fanout_lease', '1')
  redis.call('SET', KEYS[3], ARGV[7], 'PX', ARGV[8])
end
redis.call('EXPIRE', KEYS[1], ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[9])
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
return 1
