-- Write a declared check: CheckDefinitionStore.put (workers/fleet/check_definitions.py),
-- only over the revision the applier read, so two racing applies cannot both win.
--
-- KEYS  1 the definitions hash P:checkdefs
-- ARGV  1 check name   2 CheckDefinition JSON   3 expected revision ('0': must not exist)
-- Returns 1 written, 0 the stored revision is not the expected one.
local got = redis.call('TYPE', KEYS[1])['ok']
if got ~= 'none' and got ~= 'hash' then
  return redis.error_reply('ASSAY_CONFLICT key ' .. KEYS[1] .. ' holds a ' .. got)
end
local current = redis.call('HGET', KEYS[1], ARGV[1])
local expected = tonumber(ARGV[3])
if expected == 0 then
  if current then return 0 end
else
  if not current then return 0 end
  if tonumber(cjson.decode(current)['revision']) ~= expected then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
