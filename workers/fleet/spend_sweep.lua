-- Charge the reservations whose lease ran out (their worker stopped mid-call), each in
-- full, once: SpendStore.release_expired (workers/fleet/spend.py), which every reserve
-- also asks for first when one is due (spend_reserve.lua answers 'sweep').
-- The caller reads which reservations are due and which period records each one's record
-- names (written once, at its reserve) and passes them; the script checks they are still
-- the same, so it touches no key it was not given.
--
-- KEYS  1 reservations in flight P:spend:inflight   2 threshold events P:spend:events
--       3 .. for each reservation: its record P:spend:res:{id}, then the period records it
--       holds, as its record names them
-- ARGV  1 now, epoch ms   2 events maxlen   3 record keep, s
--       4 .. for each reservation two: its id, how many period records follow its record
-- Returns {released, changed}: how many run-out reservations it released (charged when
-- still held), and how many it left because their record names other period records than
-- the caller passed (read them again).
local inflight, events = KEYS[1], KEYS[2]
local now_ms, maxlen, keep_s = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local released, changed = 0, 0
local k = 3
for a = 4, #ARGV, 2 do
  local id, rec, n = ARGV[a], KEYS[k], tonumber(ARGV[a + 1])
  local held = {}
  for i = 1, n do held[i] = KEYS[k + i] end
  k = k + 1 + n
  local lease = redis.call('ZSCORE', inflight, id)
  if lease and tonumber(lease) <= now_ms then
    local f = redis.call('HMGET', rec, 'keys', 'tokens', 'cost', 'state')
    if (f[1] or '') ~= table.concat(held, ' ') then
      changed = changed + 1
    else
      released = released + 1
      redis.call('ZREM', inflight, id)
      if f[4] == 'held' then
        local tokens, cost = num(f[2]), tonumber(f[3])
        for _, key in ipairs(held) do
          redis.call('HINCRBY', key, 'reserved_tokens', -tokens)
          if cost and cost >= 0 then
            redis.call('HINCRBY', key, 'reserved_cost', -cost)
            charge(key, tokens, cost, events, maxlen, now_ms)
          else
            charge(key, tokens, nil, events, maxlen, now_ms)
          end
          redis.call('HINCRBY', key, 'expired', 1)
          redis.call('HINCRBY', key, 'expired_tokens', tokens)
        end
        redis.call('HSET', rec, 'state', 'expired')
        redis.call('EXPIRE', rec, keep_s)
      end
    end
  end
end
return {released, changed}
