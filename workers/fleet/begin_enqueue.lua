-- Ask to enqueue one evaluation of a claimed timer: TimerStore.begin_enqueue_many
-- (workers/fleet/timers.py). A marker holds 'sent', or '{owner}|{hold until}|{fencing token}'
-- while a claimer sends it. Hold times use the callers' clock (like leases), never Redis's.
--
-- KEYS  1 the fire's marker   P:enqueued:{fire}
--       2 timers in flight    P:timers:inflight
--       3 timer entries       P:timers:entries
-- ARGV  1 owner  2 now  3 hold until  4 the marker's TTL, s  5 a fresh fencing token
--       6 the timer the fire belongs to ('' none)  7 that timer's token when claimed
-- Returns {'sent', '0'}: sent already, or its timer is no longer the caller's claim (it was
-- acknowledged since, its markers dropped: nothing of it is sent again); {'held', seconds
-- left}: another claimer is sending it; {'acquired', token}: go ahead.
local current = redis.call('GET', KEYS[1])
if current == 'sent' then
  return {'sent', '0'}
end
if ARGV[6] ~= '' then
  local body = redis.call('HGET', KEYS[3], ARGV[6])
  local ok, entry = pcall(cjson.decode, body or '')
  if not redis.call('ZSCORE', KEYS[2], ARGV[6]) or not ok or type(entry) ~= 'table'
      or entry['token'] ~= ARGV[7] then
    return {'sent', '0'}
  end
end
if current then
  local owner, hold_until = string.match(current, '^([^|]*)|([%d%.]+)')
  if owner ~= ARGV[1] and hold_until and tonumber(hold_until) > tonumber(ARGV[2]) then
    return {'held', tostring(tonumber(hold_until) - tonumber(ARGV[2]))}
  end
end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. ARGV[3] .. '|' .. ARGV[5], 'EX', ARGV[4])
return {'acquired', ARGV[5]}
