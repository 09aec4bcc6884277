-- Charge one model call against a model's requests/min and tokens/min if both have room:
-- FleetRateLimiter.try_acquire (workers/fleet/ratelimit.py). GCRA: per limit one number,
-- the theoretical arrival time (TAT) of the next unit of capacity, in seconds on the clock
-- the caller passes (Redis's).
--
-- KEYS  1 P:ratelimit:{model}:rpm   2 P:ratelimit:{model}:tpm
-- ARGV  1 requests/min (0 = off)   2 tokens/min (0 = off)   3 the call's tokens
--       4 window, s   5 now, epoch s
-- Returns '0' when the call may go (and charges it), else the seconds to wait.
local now = tonumber(ARGV[5])
local window = tonumber(ARGV[4])
local function plan(key, rate, cost)
  if rate <= 0 then
    return nil, -1
  end
  if cost > rate then cost = rate end
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local new_tat = tat + cost * window / rate
  return new_tat, new_tat - window - now
end
local rpm_tat, rpm_wait = plan(KEYS[1], tonumber(ARGV[1]), 1)
local tpm_tat, tpm_wait = plan(KEYS[2], tonumber(ARGV[2]), tonumber(ARGV[3]))
local wait = math.max(rpm_wait, tpm_wait)
if wait > 0 then
  return tostring(wait)
end
if rpm_tat then
  redis.call('SET', KEYS[1], tostring(rpm_tat), 'PX', math.ceil((rpm_tat - now) * 1000) + 1000)
end
if tpm_tat then
  redis.call('SET', KEYS[2], tostring(tpm_tat), 'PX', math.ceil((tpm_tat - now) * 1000) + 1000)
end
return '0'
