-- Give up on a change: SinkFeed.dead_letter (workers/fleet/notify_feed.py). Keeps it in
-- the sink's dead-letter stream and acknowledges it in one step.
--
-- KEYS  1 the stream P:changes (or P:spend:events)   2 dead letters P:notify:S:dead
--       3 attempts P:notify:S:attempts   4 counters P:notify:S:stats
-- ARGV  1 the sink's group notify:S   2 entry id   3 the dead-letter stream's MAXLEN (~)
--       4 .. the dead letter's fields: field, value, field, value ...
-- Returns 1 when this call dead-lettered the entry, 0 when it was not pending any more.
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return 0
end
local fields = {}
for i = 4, #ARGV do
  fields[#fields + 1] = ARGV[i]
end
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', unpack(fields))
redis.call('HDEL', KEYS[3], ARGV[2])
redis.call('HINCRBY', KEYS[4], 'dead_lettered', 1)
return 1
