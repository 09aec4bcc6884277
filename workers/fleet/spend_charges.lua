-- Shared by the spend scripts (workers/fleet/spend.py), prepended to each: charging a
-- period record, the event a crossed threshold adds, and splitting a list of key names.
-- Every key they touch is one their script was given in KEYS.
local function num(v)
  return tonumber(v or '0') or 0
end
-- a period record's field, and its name in events
local RESOURCES = {{'tokens', 'tokens'}, {'cost', 'cost_usd'}}
-- Add an event for each threshold of `key` that spend has crossed, once per record. One read
-- decides; an event costs a few more commands, once per threshold and period.
local function thresholds(key, events, maxlen, now_ms, refused_resource)
  local f = redis.call('HMGET', key, 'tokens', 'cost', 'limit_tokens', 'limit_cost',
    'alerted:tokens:80', 'alerted:tokens:100', 'alerted:cost:80', 'alerted:cost:100')
  for i, r in ipairs(RESOURCES) do
    local spent, limit = num(f[i]), num(f[i + 2])
    if limit > 0 then
      local marks = {}
      if spent >= 0.8 * limit and not f[3 + 2 * i] then marks[#marks + 1] = 80 end
      if (spent >= limit or refused_resource == r[1]) and not f[4 + 2 * i] then
        marks[#marks + 1] = 100
      end
      for _, mark in ipairs(marks) do
        if redis.call('HSETNX', key, 'alerted:' .. r[1] .. ':' .. mark, now_ms) == 1 then
          local meta = redis.call('HMGET', key, 'scope', 'scope_id', 'period')
          redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*',
            'scope', meta[1] or '', 'scope_id', meta[2] or '', 'period', meta[3] or '',
            'resource', r[2], 'threshold', mark, 'spent', spent, 'limit', limit, 'at', now_ms)
        end
      end
    end
  end
end
local function charge(key, tokens, cost, events, maxlen, now_ms)
  redis.call('HINCRBY', key, 'tokens', tokens)
  if cost then redis.call('HINCRBY', key, 'cost', cost) end
  thresholds(key, events, maxlen, now_ms, nil)
end
local function split(text)
  local out = {}
  for part in string.gmatch(text or '', '%S+') do out[#out + 1] = part end
  return out
end
