-- Claim one scheduler fire of a run for one fencing token: VerdictStore.claim_fence
-- (workers/fleet/store.py). Runs after key_checks.lua (prepended). The token is kept on
-- the run's hash as field 'fence:' .. fire id.
--
-- KEYS  1 run hash P:run:{run_id}   2 recorded runs P:runs
-- ARGV  1 fire id   2 fencing token   3 ttl, s   4 run_id
-- Returns 1 when this token may run the fire (the first one seen, or that one again: a
-- redelivery; or the run is recorded already, which the delivery then finds), 0 when another
-- token already claimed it.
local problem = first_type_problem({KEYS[1], 'hash', KEYS[2], 'hash'})
if problem then return conflict(problem) end
if redis.call('HEXISTS', KEYS[2], ARGV[4]) == 1 then return 1 end
local field = 'fence:' .. ARGV[1]
local holder = redis.call('HGET', KEYS[1], field)
if holder then
  if holder == ARGV[2] then return 1 end
  return 0
end
local fresh = redis.call('EXISTS', KEYS[1]) == 0
redis.call('HSET', KEYS[1], field, ARGV[2])
if fresh then
  redis.call('EXPIRE', KEYS[1], ARGV[3])
end
return 1
