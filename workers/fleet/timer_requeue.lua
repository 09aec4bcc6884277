-- Put timers whose lease ran out back in due at their own instant:
-- TimerStore.requeue_expired (workers/fleet/timers.py). An entry that cannot be read goes
-- back at now; a timer without an entry is dropped.
--
-- KEYS  1 in flight P:timers:inflight   2 due P:timers:due   3 entries P:timers:entries
-- ARGV  1 now   2 how many at most
-- Returns how many leases it found run out.
local problem = types_problem(KEYS, {'zset', 'zset', 'hash'})
if problem then return conflict(problem) end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local back = {}
for _, id in ipairs(ids) do
  local body = redis.call('HGET', KEYS[3], id)
  if body then
    local entry = due_of(body)
    back[#back + 1] = {id, entry and entry['due'] or ARGV[1]}
  else
    back[#back + 1] = {id, false}
  end
end
for _, item in ipairs(back) do
  redis.call('ZREM', KEYS[1], item[1])
  if item[2] then
    redis.call('ZADD', KEYS[2], item[2], item[1])
  end
end
return #ids
