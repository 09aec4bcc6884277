-- Seal a batch: every target is registered, its total is final: VerdictStore.seal_batch
-- (workers/fleet/store.py). A batch closed as incomplete meanwhile (its lease lapsed while
-- the submitter stalled) is complete after all: the flag goes. Runs after key_checks.lua
-- and store_batch_finish.lua (prepended).
--
-- KEYS  1 batch hash P:batch:{batch_id}   2 fan-out lease P:batch:{batch_id}:fanout
--       3 batch runs list P:batch:{batch_id}:runs   4 batch results P:batch:{batch_id}:results
-- ARGV  1 now ISO   2, 3 unused (the abandon script's)   4 report TTL, s
-- Returns 1.
local problem = type_problem(KEYS[1], 'hash') or integer_problem(KEYS[1], 'pending')
if problem then return conflict(problem) end
redis.call('HSET', KEYS[1], 'sealed', '1')
redis.call('HDEL', KEYS[1], 'incomplete', 'stop_reason')
redis.call('DEL', KEYS[2])
finish_at_seal()
return 1
