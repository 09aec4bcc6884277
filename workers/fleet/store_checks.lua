-- Checks every store script runs before its first write (Redis does not roll a failed
-- script back): each key it touches must be absent or of the type it expects, and every
-- stored value it does arithmetic on must be an integer. A problem is returned as an
-- ASSAY_CONFLICT error, which VerdictStore raises as StoreConflict; nothing is written then.
local function type_problem(key, want)
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= want then
    return 'key ' .. key .. ' holds a ' .. got .. ' where the store keeps a ' .. want
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
