-- Forget a policy set (its policies stay): PolicyStore.drop_set
-- (workers/fleet/policy_store.py).
--
-- KEYS  1 set names P:policysets   2 the set's key P:policyset:{set}
-- ARGV  1 set name
-- Returns 1 when the set existed, else 0.
local existed = redis.call('SREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2])
return existed
