-- Skip a schedule's fires when its ceiling for that day is reached (a call was refused, or
-- spend reached it): SpendStore.skip_if_reached (workers/fleet/spend.py).
--
-- KEYS  1 the schedule's day record P:spend:schedule:{id}:day:{YYYYMMDD}
--       2 period index P:spend:index
-- ARGV  1 schedule id   2 tokens ceiling   3 cost ceiling micro (0 = none)
--       4 instants to skip   5 period label (YYYY-MM-DD)   6 period start, epoch s
--       7 record TTL, s   8 the record's index member
-- Returns {'reached', resource, spent, limit, skipped that day} and counts the skipped
-- instants; else {}.
local function num(v) return tonumber(v or '0') or 0 end
local lt, lc = num(ARGV[2]), num(ARGV[3])
if lt <= 0 and lc <= 0 then return {} end
local f = redis.call('HMGET', KEYS[1], 'tokens', 'cost', 'reached_at')
local spent_t, spent_c = num(f[1]), num(f[2])
local reason = nil
if lt > 0 and spent_t >= lt then
  reason = {'reached', 'tokens', tostring(spent_t), tostring(lt)}
elseif lc > 0 and spent_c >= lc then
  reason = {'reached', 'cost_usd', tostring(spent_c), tostring(lc)}
elseif f[3] then
  reason = {'reached', 'refused', tostring(spent_t), tostring(lt)}
end
if not reason then return {} end
redis.call('HSET', KEYS[1], 'scope', 'schedule', 'scope_id', ARGV[1], 'period', ARGV[5],
  'limit_tokens', lt, 'limit_cost', lc)
local total = redis.call('HINCRBY', KEYS[1], 'skipped', tonumber(ARGV[4]))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[7]))
redis.call('ZADD', KEYS[2], 'NX', tonumber(ARGV[6]), ARGV[8])
reason[5] = tostring(total)
return reason
