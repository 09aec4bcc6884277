-- Charge every reservation whose lease ran out: SpendStore.release_expired
-- (workers/fleet/spend.py); what each reserve also does first (spend_charges.lua).
--
-- KEYS  1 reservations in flight P:spend:inflight   2 threshold events P:spend:events
-- ARGV  1 key prefix   2 now, epoch ms   3 events maxlen   4 record keep, s   5 how many
-- Returns how many reservations it found run out.
return sweep(ARGV[1], KEYS[1], KEYS[2], ARGV[3], tonumber(ARGV[2]), tonumber(ARGV[4]),
  tonumber(ARGV[5]))
