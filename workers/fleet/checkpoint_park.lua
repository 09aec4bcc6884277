-- Store a parked run's state: checkpoints.park (workers/fleet/checkpoints.py). Each park
-- counts up the run's sequence, so a stale continuation cannot resume it.
--
-- KEYS  1 the run's checkpoint P:checkpoint:{run id}
-- ARGV  1 request JSON   2 state JSON   3 wake at (ISO 8601)   4 TTL, s
-- Returns the new sequence.
local n = redis.call('HINCRBY', KEYS[1], 'sequence', 1)
redis.call('HSET', KEYS[1], 'request', ARGV[1], 'state', ARGV[2], 'wake_at', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return n
