-- Count a delivery attempt before it is made: SinkFeed.begin_attempt
-- (workers/fleet/notify_feed.py), so a change that crashes its notifier every time is
-- still dead-lettered after the bound.
--
-- KEYS  1 attempts P:notify:S:attempts   2 counters P:notify:S:stats
-- ARGV  1 entry id
-- Returns this attempt's number (1 = first; later ones count as retries).
local n = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
if n > 1 then
  redis.call('HINCRBY', KEYS[2], 'retries', 1)
end
return n
