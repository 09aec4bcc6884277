-- Everything a run needs to know before it starts, in one round trip: ProbeStore.lookup
-- (workers/fleet/probe_store.py). It claims the compile only when there is no probe at all
-- and no claim: a retired probe (its JSON says so, which this script does not parse) takes
-- the long way, ProbeStore.claim_compile.
--
-- KEYS  1 the check's probe P:probe:{check}
--       2 the batch's probe P:batchprobe:{batch} (the check's again when there is no batch)
--       3 the compile claim
-- ARGV  1 a claim token ('' = do not claim)   2 its lease, ms
-- Returns {own probe JSON, batch probe JSON, claim state, 1 when claimed here}.
local own = redis.call('GET', KEYS[1])
local batch = false
if KEYS[2] ~= KEYS[1] then batch = redis.call('GET', KEYS[2]) end
local state = redis.call('GET', KEYS[3])
local claimed = 0
if ARGV[1] ~= '' and not own and not batch and not state then
  redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[2])
  claimed = 1
end
return {own, batch, state, claimed}
