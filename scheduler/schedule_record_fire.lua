-- Record a schedule's last fire, unless the schedule was removed meanwhile:
-- ScheduleStore.record_fire (scheduler/schedules.py). Runs after key_checks.lua
-- (prepended). The fire is kept apart from the schedule, so recording it never overwrites
-- a change a person made at the same moment.
--
-- KEYS  1 schedules P:schedules   2 last fires P:schedule-fires
-- ARGV  1 schedule id   2 the fire's JSON
-- Returns 1 recorded, 0 the schedule is gone.
local problem = types_problem(KEYS, 'hash')
if problem then return conflict(problem) end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
