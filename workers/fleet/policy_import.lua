-- Store imported policies, and with a set name make the set exactly them, in one step:
-- PolicyStore.save (workers/fleet/policy_store.py). A fleet reading the set mid-import sees
-- it before or after, never half of it.
--
-- KEYS  1 policy names P:policies   2 set names P:policysets
--       3 .. n+2 each policy's key P:policy:{name}, in the order of ARGV's pairs
--       n+3 the set's key P:policyset:{set}, only with a set name
-- ARGV  1 import time, ms (the names' score)   2 set name ('' none)
--       then name, JSON for each policy
-- Returns the names that existed before.
local replaced = {}
local names = {}
for i = 3, #ARGV, 2 do
  local key = KEYS[(i - 1) / 2 + 2]
  if redis.call('EXISTS', key) == 1 then replaced[#replaced + 1] = ARGV[i] end
  redis.call('SET', key, ARGV[i + 1])
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[i])
  names[#names + 1] = ARGV[i]
end
if ARGV[2] ~= '' then
  local set_key = KEYS[#names + 3]
  redis.call('DEL', set_key)
  if #names > 0 then redis.call('SADD', set_key, unpack(names)) end
  redis.call('SADD', KEYS[2], ARGV[2])
end
return replaced
