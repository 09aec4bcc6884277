-- Checks every schedule script runs before its first write (Redis does not roll a failed
-- script back): each of its keys must be absent or a hash, so a create never stops halfway.
-- Prepended to schedule_create.lua and schedule_record_fire.lua (scheduler/schedules.py).
for _, key in ipairs(KEYS) do
  local got = redis.call('TYPE', key)['ok']
  if got ~= 'none' and got ~= 'hash' then
    return redis.error_reply('ASSAY_CONFLICT key ' .. key .. ' holds a ' .. got ..
      ' where the schedules keep a hash')
  end
end
