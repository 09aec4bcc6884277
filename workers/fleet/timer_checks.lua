-- Checks every timer script (workers/fleet/timers.py) runs before its first write: Redis
-- does not roll back a script that fails halfway. Prepended to each timer script.
--
-- type_problem(keys, wants): an ASSAY_CONFLICT error when a key holds another type than the
-- one the timers keep there (absent is fine), else nil.
-- due_of(body): a timer entry's JSON decoded, or nil when it is unreadable or has no due.
local function type_problem(keys, wants)
  for i, key in ipairs(keys) do
    local got = redis.call('TYPE', key)['ok']
    if got ~= 'none' and got ~= wants[i] then
      return redis.error_reply('ASSAY_CONFLICT key ' .. key .. ' holds a ' .. got ..
        ' where the timers keep a ' .. wants[i])
    end
  end
  return nil
end
local function due_of(body)
  local ok, entry = pcall(cjson.decode, body)
  if ok and type(entry) == 'table' and tonumber(entry['due']) then
    return entry
  end
  return nil
end
