-- Hold one model call's estimate against every ceiling that applies, in one step:
-- SpendStore.reserve (workers/fleet/spend.py). While a reservation's lease has run out it
-- decides nothing and answers 'sweep': the caller charges those first (spend_sweep.lua),
-- then asks again. A call is admitted when, for each ceiling,
-- spent + reserved + estimate <= limit; it waits while only reservations stand in the way,
-- and is refused when spend alone leaves no room.
--
-- KEYS  1 reservations in flight P:spend:inflight   2 schedules' ceilings P:spend:limits
--       3 threshold events P:spend:events   4 period index P:spend:index
--       5 this reservation's record P:spend:res:{id}
--       6 .. one period record per scope, in the order of ARGV 10 ..
-- ARGV  1 reservation id   2 tokens   3 cost micro (-1: price unknown)   4 lease, ms
--       5 record keep, s   6 events maxlen   7 now, epoch ms   8 history, s   9 run id
--       10 .. one per scope, its parts joined by '|': kind (fleet-hour | fleet-day |
--       schedule | batch), scope id, default tokens, default cost micro (0 = none), record
--       TTL s, period start epoch s, index member, scope, period. The caller works out the
--       period from now. (One argument per scope: each argument costs the caller time.)
-- Returns {'ok'} | {'wait', label, resource, spent, reserved, limit}
--       | {'refused', label, resource, spent, limit} | {'sweep'} (nothing written).
local inflight, limits, events, index, rec = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, want_t, want_c = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local lease_ms, keep_s, maxlen = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local now_ms = tonumber(ARGV[7])
if #redis.call('ZRANGEBYSCORE', inflight, '-inf', now_ms, 'LIMIT', 0, 1) > 0 then
  return {'sweep'}
end
local now_s = math.floor(now_ms / 1000)
local scopes = {}
for a = 10, #ARGV do
  local kind, sid, lt, lc, ttl, start, member, scope, period = string.match(ARGV[a],
    '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  local s = {kind = kind, sid = sid, lt = num(lt), lc = num(lc), ttl = tonumber(ttl),
    start = num(start), member = member, scope = scope, period = period, key = KEYS[a - 4]}
  if kind == 'schedule' then
    local own = redis.call('HGET', limits, 'schedule:' .. sid)
    if own then
      local parts = split(own)
      s.lt, s.lc = num(parts[1]), num(parts[2])
    end
  elseif kind == 'batch' then
    local own = redis.call('HMGET', s.key, 'own', 'limit_tokens', 'limit_cost')
    if own[1] == '1' then s.lt, s.lc = num(own[2]), num(own[3]) end
  end
  scopes[#scopes + 1] = s
end
local wait = nil
for _, s in ipairs(scopes) do
  local f = redis.call('HMGET', s.key, 'tokens', 'cost', 'reserved_tokens', 'reserved_cost',
    'limit_tokens', 'limit_cost', 'scope')
  local spent_t, spent_c, res_t, res_c = num(f[1]), num(f[2]), num(f[3]), num(f[4])
  s.fresh = not f[7] or num(f[5]) ~= s.lt or num(f[6]) ~= s.lc
  local checks = {{'tokens', s.lt, spent_t, res_t, want_t}}
  if want_c >= 0 then checks[2] = {'cost', s.lc, spent_c, res_c, want_c} end
  for _, c in ipairs(checks) do
    local resource, limit, spent, reserved, want = c[1], c[2], c[3], c[4], c[5]
    if limit > 0 and spent + want > limit then
      redis.call('HSET', s.key, 'scope', s.scope, 'scope_id', s.sid, 'period', s.period,
        'limit_tokens', s.lt, 'limit_cost', s.lc)
      redis.call('HINCRBY', s.key, 'refused', 1)
      redis.call('HSETNX', s.key, 'reached_at', now_ms)
      thresholds(s.key, events, maxlen, now_ms, resource)
      redis.call('EXPIRE', s.key, s.ttl)
      redis.call('ZADD', index, 'NX', s.start, s.member)
      return {'refused', s.kind .. ':' .. s.sid .. ':' .. s.period, resource, tostring(spent),
        tostring(limit)}
    end
    if not wait and limit > 0 and spent + reserved + want > limit then
      wait = {'wait', s.kind .. ':' .. s.sid .. ':' .. s.period, resource, tostring(spent),
        tostring(reserved), tostring(limit)}
    end
  end
end
if wait then return wait end
local keys = {}
local created = false
for _, s in ipairs(scopes) do
  redis.call('HINCRBY', s.key, 'reserved_tokens', want_t)
  if want_c >= 0 then
    redis.call('HINCRBY', s.key, 'reserved_cost', want_c)
  else
    redis.call('HINCRBY', s.key, 'unpriced', 1)
  end
  if redis.call('HINCRBY', s.key, 'calls', 1) == 1 then
    created = true
    redis.call('EXPIRE', s.key, s.ttl)
    redis.call('ZADD', index, 'NX', s.start, s.member)
  end
  if s.fresh then  -- a new record, or new ceilings since its last call
    redis.call('HSET', s.key, 'scope', s.scope, 'scope_id', s.sid, 'period', s.period,
      'limit_tokens', s.lt, 'limit_cost', s.lc)
  end
  keys[#keys + 1] = s.key
end
if created then
  redis.call('ZREMRANGEBYSCORE', index, '-inf', now_s - tonumber(ARGV[8]))
end
redis.call('HSET', rec, 'keys', table.concat(keys, ' '), 'tokens', want_t, 'cost', want_c,
  'run', ARGV[9], 'state', 'held')
redis.call('EXPIRE', rec, math.ceil(lease_ms / 1000) + keep_s)
redis.call('ZADD', inflight, now_ms + lease_ms, id)
return {'ok'}
