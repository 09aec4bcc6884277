-- Extend a batch fan-out's lease while its owner still holds it (compare-and-extend):
-- VerdictStore.renew_fanout (workers/fleet/store.py).
--
-- KEYS  1 fan-out lease P:batch:{batch_id}:fanout
-- ARGV  1 owner token   2 lease ms
-- Returns 1 when renewed, 0 when the lease is no longer this owner's (it lapsed, or the
-- batch was sealed).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
