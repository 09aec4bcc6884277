-- Replace a call's reservation by what it really used: SpendStore.settle
-- (workers/fleet/spend.py). Repeating it (a retry after a lost reply) changes nothing; a
-- settle after the lease ran out (charged in full) corrects the charge to the real figure.
-- The caller reads which period records the reservation holds (its record's keys, written
-- once when it was reserved) and passes them; the script checks they are still the same.
--
-- KEYS  1 reservations in flight P:spend:inflight   2 threshold events P:spend:events
--       3 the reservation's record P:spend:res:{id}
--       4 .. the period records it holds, as its record names them
-- ARGV  1 reservation id   2 tokens used   3 cost micro used (-1: price unknown)
--       4 now, epoch ms   5 events maxlen   6 record keep, s
--       7 the record's keys as the caller read them
-- Returns 1 settled, 0 settled before (nothing changed), -1 no such reservation (its record
-- outlived its lease by a day and is gone), -2 its record names other period records than
-- the caller passed (nothing changed: read them again).
local inflight, events, rec = KEYS[1], KEYS[2], KEYS[3]
local id, used_t, used_c = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now_ms, maxlen, keep_s = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local f = redis.call('HMGET', rec, 'keys', 'tokens', 'cost', 'state')
if not f[1] then return -1 end
if f[1] ~= ARGV[7] then return -2 end
if f[4] == 'settled' then return 0 end
local held_t, held_c = num(f[2]), tonumber(f[3]) or -1
local held = redis.call('ZREM', inflight, id) == 1 and f[4] == 'held'
for k = 4, #KEYS do
  local key, cost = KEYS[k], nil
  if held then
    redis.call('HINCRBY', key, 'reserved_tokens', -held_t)
    if held_c >= 0 then redis.call('HINCRBY', key, 'reserved_cost', -held_c) end
    if used_c >= 0 then cost = used_c end
    charge(key, used_t, cost, events, maxlen, now_ms)
  else
    -- its lease ran out first and charged the whole estimate: correct it to what was used
    if used_c >= 0 and held_c >= 0 then cost = used_c - held_c end
    charge(key, used_t - held_t, cost, events, maxlen, now_ms)
  end
end
redis.call('HSET', rec, 'state', 'settled')
redis.call('EXPIRE', rec, keep_s)
return 1
