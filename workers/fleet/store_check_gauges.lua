-- Read what the per-check gauges show of each of the newest checks, in one step:
-- VerdictStore.check_gauges (workers/fleet/store.py), at every Prometheus scrape. The
-- caller reads the newest check ids (P:checks) first and passes each check's key. Read-only.
--
-- KEYS  1 .. each check's hash P:check:{check_id}
-- ARGV  none
-- Returns kind, target, exit_code, finished_ms, source ('' where absent) for each key in
-- order: five values per check.
local out = {}
for _, key in ipairs(KEYS) do
  local row = redis.call('HMGET', key, 'kind', 'target', 'exit_code', 'finished_ms', 'source')
  for i = 1, 5 do
    out[#out + 1] = row[i] or ''
  end
end
return out
