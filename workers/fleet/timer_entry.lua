-- A timer entry as the timer scripts read it (workers/fleet/timers.py), prepended to each
-- after key_checks.lua.
--
-- due_of(body): a timer entry's JSON decoded, or nil when it is unreadable or has no due.
local function due_of(body)
  local ok, entry = pcall(cjson.decode, body)
  if ok and type(entry) == 'table' and tonumber(entry['due']) then
    return entry
  end
  return nil
end
