-- The end of a batch finished at its seal (its runs all recorded before it), shared by
-- store_seal_batch.lua and store_abandon_batch.lua (prepended to both, after
-- key_checks.lua): defines finish_at_seal(), which reads and writes only their keys.
--
-- KEYS  1 batch hash   3 batch runs list   4 batch results
-- ARGV  1 now ISO   4 how long a finished batch that changed no verdict is kept, s (as
--       record_verdict.lua does)
local function finish_at_seal()
  if tonumber(redis.call('HGET', KEYS[1], 'pending') or '0') > 0 then return end
  redis.call('HSETNX', KEYS[1], 'finished_at', ARGV[1])
  if redis.call('HGET', KEYS[1], 'changed') ~= '1' then
    for i = 3, 4 do
      if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('EXPIRE', KEYS[i], ARGV[4]) end
    end
    redis.call('EXPIRE', KEYS[1], ARGV[4])
  end
end
