-- Keep a consumer's pending changes its own, or let them go: SinkFeed.keep and
-- SinkFeed.release (workers/fleet/notify_feed.py). Resets each entry's idle time, so no
-- other replica's XAUTOCLAIM takes it while this consumer lives (or sets a long idle time,
-- so any replica takes it at once).
--
-- KEYS  1 the stream P:changes (or P:spend:events)
-- ARGV  1 the sink's group notify:S   2 this consumer   3 idle ms to set ('' = now)
--       4 .. the entry ids
-- Returns the ids that are still this consumer's.
local mine = {}
for i = 4, #ARGV do
  local id = ARGV[i]
  local owned = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1, ARGV[2])
  if #owned > 0 then
    if ARGV[3] == '' then
      redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'JUSTID')
    else
      redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, id, 'IDLE', ARGV[3], 'JUSTID')
    end
    mine[#mine + 1] = id
  end
end
return mine
