-- Delete a declared check: CheckDefinitionStore.delete
-- (workers/fleet/check_definitions.py), only at the revision the pruner read.
--
-- KEYS  1 the definitions hash P:checkdefs
-- ARGV  1 check name   2 expected revision
-- Returns 1 deleted, 0 gone or changed since.
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current then return 0 end
if tonumber(cjson.decode(current)['revision']) ~= tonumber(ARGV[2]) then return 0 end
redis.call('HDEL', KEYS[1], ARGV[1])
return 1
