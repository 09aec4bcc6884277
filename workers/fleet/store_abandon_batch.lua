-- Seal an unsealed batch as incomplete: VerdictStore.abandon_batch, and VerdictStore.batch
-- when a reader finds its fan-out's lease gone (workers/fleet/store.py). Its total is the
-- runs registered so far, it finishes once they have verdicts, and store_register_run.lua
-- refuses it any further run. Runs after key_checks.lua and store_batch_finish.lua
-- (prepended).
--
-- KEYS  1 batch hash P:batch:{batch_id}   2 fan-out lease P:batch:{batch_id}:fanout
--       3 batch runs list P:batch:{batch_id}:runs   4 batch results P:batch:{batch_id}:results
-- ARGV  1 now ISO   2 stop reason
--       3 mode: 'stopped' (the submitter says its fan-out stopped) or 'lapsed' (only if
--         the batch's lease is gone, as a reader found)
--       4 report TTL, s
-- Returns 1 when this call closed it, 0 when it was sealed already (or, 'lapsed', its
-- lease is still held).
local problem = type_problem(KEYS[1], 'hash') or integer_problem(KEYS[1], 'pending')
if problem then return conflict(problem) end
if redis.call('HEXISTS', KEYS[1], 'created_at') == 0
    or redis.call('HGET', KEYS[1], 'sealed') == '1' then
  return 0
end
if ARGV[3] == 'lapsed' and (redis.call('HGET', KEYS[1], 'fanout_lease') ~= '1'
    or redis.call('EXISTS', KEYS[2]) == 1) then
  return 0
end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[1], 'sealed', '1', 'incomplete', '1', 'stop_reason', ARGV[2])
finish_at_seal()
return 1
