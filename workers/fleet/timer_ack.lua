-- Finish a claimed timer: TimerStore.ack (workers/fleet/timers.py). For a schedule the next
-- fire takes its place in the same step; an entry replaced while in flight wins.
--
-- KEYS  1 in flight P:timers:inflight   2 entries P:timers:entries   3 due P:timers:due
-- ARGV  1 timer id   2 its token when claimed   3 successor's JSON ('' none)
--       4 successor's due instant
-- Returns 1 done, 2 replaced meanwhile (replacement kept, successor dropped), 0 not in
-- flight (finished by another, or removed).
local problem = types_problem(KEYS, {'zset', 'hash', 'zset'})
if problem then return conflict(problem) end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
local body = redis.call('HGET', KEYS[2], ARGV[1])
local entry = nil
if body then
  entry = due_of(body)
  if not entry then
    return redis.error_reply('ASSAY_CONFLICT timer ' .. ARGV[1] .. ' has an unreadable entry')
  end
end
redis.call('ZREM', KEYS[1], ARGV[1])
if entry and entry['token'] ~= ARGV[2] then
  redis.call('ZADD', KEYS[3], entry['due'], ARGV[1])
  return 2
end
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
  redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
else
  redis.call('HDEL', KEYS[2], ARGV[1])
end
return 1
