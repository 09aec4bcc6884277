-- Claim due timers: TimerStore.claim (workers/fleet/timers.py). Moves them from due to in
-- flight with a lease instead of popping them, so a claimer that dies loses nothing.
--
-- KEYS  1 due P:timers:due   2 in flight P:timers:inflight   3 entries P:timers:entries
-- ARGV  1 now   2 lease end   3 how many at most
-- Returns id, entry JSON (false when gone), id, entry JSON, ...
local problem = types_problem(KEYS, {'zset', 'zset', 'hash'})
if problem then return conflict(problem) end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('ZADD', KEYS[2], ARGV[2], id)
  out[#out + 1] = id
  out[#out + 1] = redis.call('HGET', KEYS[3], id)
end
return out
