-- Forget a policy and its place in every set: PolicyStore.drop
-- (workers/fleet/policy_store.py). The caller reads the set names first and passes each
-- set's key; if the sets changed since, nothing is written and the caller reads again.
--
-- KEYS  1 the policy P:policy:{name}   2 policy names P:policies   3 set names P:policysets
--       4 .. each set's key P:policyset:{set}, in the order of ARGV 2 ..
-- ARGV  1 policy name   2 .. the set names the caller read
-- Returns 1 dropped, 0 there was none, -1 the sets changed since they were read.
local given = {}
for i = 2, #ARGV do given[ARGV[i]] = true end
local sets = redis.call('SMEMBERS', KEYS[3])
if #sets ~= #ARGV - 1 then return -1 end
for _, set in ipairs(sets) do
  if not given[set] then return -1 end
end
local existed = redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
for i = 4, #KEYS do
  redis.call('SREM', KEYS[i], ARGV[1])
end
return existed
