-- Acknowledge one change, count its outcome and remember what the sink was told, in one
-- step: SinkFeed.ack (workers/fleet/notify_feed.py), so a restart resends nothing that was
-- acknowledged.
--
-- KEYS  1 the stream P:changes (or P:spend:events)   2 attempts P:notify:S:attempts
--       3 counters P:notify:S:stats   4 told P:notify:S:told
-- ARGV  1 the sink's group notify:S   2 entry id   3 the outcome's counter
--       4 check id   5 told value 'AT_MS VERDICT' ('' = leave)
--       6 told mode: 'newer' (replace an older one) or 'absent' (only where none is)
--       7 told at, ms
-- Returns 1 when this call acknowledged the entry, 0 when it was not pending any more.
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return 0
end
redis.call('HDEL', KEYS[2], ARGV[2])
redis.call('HINCRBY', KEYS[3], ARGV[3], 1)
if ARGV[5] ~= '' then
  local old = redis.call('HGET', KEYS[4], ARGV[4])
  if ARGV[6] == 'absent' then
    if not old then
      redis.call('HSET', KEYS[4], ARGV[4], ARGV[5])
    end
  else
    local old_ms = -1
    if old then
      old_ms = tonumber(string.match(old, '^(%d+)'))
    end
    if tonumber(ARGV[7]) >= old_ms then
      redis.call('HSET', KEYS[4], ARGV[4], ARGV[5])
    end
  end
end
return 1
