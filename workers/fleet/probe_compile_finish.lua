-- A compile claim's holder is done: ProbeStore (workers/fleet/probe_store.py). Compare and
-- set: only the holder's own token becomes 'done'; an expired claim another run took since
-- is left alone.
--
-- KEYS  1 the compile claim P:probe:{check}:compiling or P:batchprobe:{batch}:compiling
-- ARGV  1 the holder's token   2 how long 'done' lasts, ms (the rest of the claim's life)
-- Returns OK when marked done, nil when the claim is no longer the holder's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('SET', KEYS[1], 'done', 'PX', ARGV[2])
end
return nil
