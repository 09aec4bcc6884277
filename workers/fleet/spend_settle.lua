-- Replace a call's reservation by what it really used: SpendStore.settle
-- (workers/fleet/spend.py). Repeating it (a retry after a lost reply) changes nothing; a
-- settle after the lease ran out (charged in full) corrects the charge to the real figure.
-- The period records it charges are the ones its record names (spend_charges.lua).
--
-- KEYS  1 reservations in flight P:spend:inflight   2 threshold events P:spend:events
--       3 the reservation's record P:spend:res:{id}
-- ARGV  1 reservation id   2 tokens used   3 cost micro used (-1: price unknown)
--       4 now, epoch ms   5 events maxlen   6 record keep, s
-- Returns 1 settled, 0 settled before (nothing changed), -1 no such reservation (its record
-- outlived its lease by a day and is gone).
local inflight, events, rec = KEYS[1], KEYS[2], KEYS[3]
local id, used_t, used_c = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now_ms, maxlen, keep_s = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local f = redis.call('HMGET', rec, 'keys', 'tokens', 'cost', 'state')
if not f[1] then return -1 end
if f[4] == 'settled' then return 0 end
local held_t, held_c = num(f[2]), tonumber(f[3]) or -1
local held = redis.call('ZREM', inflight, id) == 1 and f[4] == 'held'
for _, key in ipairs(split(f[1])) do
  local cost = nil
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
