-- Renew a compile claim's lease: CompileClaim (workers/fleet/probe_store.py). Compare and
-- extend: only while the claim still holds this token; a holder whose claim expired (and
-- maybe went to another run) or was marked done extends nothing.
--
-- KEYS  1 the compile claim P:probe:{check}:compiling or P:batchprobe:{batch}:compiling
-- ARGV  1 the holder's token   2 the lease, ms
-- Returns 1 renewed, 0 not.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
