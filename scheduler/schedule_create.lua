-- Store a new schedule under a name no other schedule holds: ScheduleStore.create
-- (scheduler/schedules.py). Runs after key_checks.lua (prepended).
--
-- KEYS  1 schedules P:schedules   2 names P:schedule-names
-- ARGV  1 schedule id   2 its name   3 the schedule's JSON
-- Returns 1 created, 0 the name is taken (nothing written).
local problem = types_problem(KEYS, 'hash')
if problem then return conflict(problem) end
if redis.call('HSETNX', KEYS[2], ARGV[2], ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
