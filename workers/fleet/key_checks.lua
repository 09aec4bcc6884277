-- Checks a script runs before its first write (Redis does not roll a failed script back):
-- each key it touches must be absent or of the type its owner keeps there, and every stored
-- value it does arithmetic on must be an integer. Prepended to the store's, the timers' and
-- the schedules' scripts (lua_scripts.checked_script). A problem is returned as an
-- ASSAY_CONFLICT error (the store raises it as StoreConflict); nothing is written then.
--
-- type_problem(key, want): why `key` is not a `want` (absent is fine), else nil.
-- first_type_problem({key, want, key, want, ...}): the first of those problems, else nil.
-- types_problem(keys, wants): the same for a list of keys; `wants` is one type for all of
--   them or a list of types, one per key.
-- integer_problem(key, field): why a hash field is not an integer (absent is fine), else nil.
-- conflict(problem): the ASSAY_CONFLICT error reply a script returns.
local function type_problem(key, want)
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then
    return 'key ' .. key .. ' holds a ' .. got .. ' where a ' .. want .. ' is kept'
  end
  return nil
end
local function first_type_problem(pairs)
  for i = 1, #pairs, 2 do
    local problem = type_problem(pairs[i], pairs[i + 1])
    if problem then return problem end
  end
  return nil
end
local function types_problem(keys, wants)
  for i, key in ipairs(keys) do
    local problem = type_problem(key, type(wants) == 'table' and wants[i] or wants)
    if problem then return problem end
  end
  return nil
end
local function integer_problem(key, field)
  local value = redis.call('HGET', key, field)
  if value and not string.match(value, '^%-?%d+$') then
    return 'field ' .. field .. ' of key ' .. key .. ' is not an integer'
  end
  return nil
end
local function conflict(problem)
  return redis.error_reply('ASSAY_CONFLICT ' .. problem)
end
