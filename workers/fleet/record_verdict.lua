-- Record a finished run, once: VerdictStore.record_verdict (workers/fleet/store.py).
-- Runs after key_checks.lua (its checks are prepended).
--
-- KEYS  1 run hash             P:run:{run_id}
--       2 check hash           P:check:{check_id}
--       3 history stream       P:check:{check_id}:history
--       4 verdict templates    P:check:{check_id}:verdicts   (template id -> verdict JSON,
--                                                             '#' .. id -> entries using it)
--       5 checks zset          P:checks
--       6 change stream        P:changes
--       7 unfinished zset      P:unfinished
--       8 the run's checkpoint (deleted with the verdict)
--       9 recorded runs        P:runs        (run id -> 'check_id entry_id verdict')
--      10 forgetting runs      P:runs:expiring  (run ids out of history, by when to forget)
--   11-13 the new verdict's indexes: idx:verdict:{v}, idx:target:{t}, idx:tv:{v}:{t}
--   14-16 the previous verdict's: idx:verdict:{pv}, idx:tv:{pv}:{pt}, idx:target:{pt}
--      17 batch hash, 18 batch results (placeholders when the run has no batch)
--      21 batch runs list (a placeholder when the run has no batch)
--      19 the repeated run's hash (mode repeat; a placeholder otherwise)
-- ARGV  1 run_id  2 check_id  3 target  4 verdict kind  5 exit code
--       6 verdict JSON (the check's latest)  7 the encoded report ('' in mode repeat)
--       8 finished ms  9 finished ISO  10 history limit  11 the report's TTL, s
--      12 request kind  13 request text  14 batch row (store.batch_row)  15 change stream maxlen
--      16 now ISO  17 source  18 counts ('1'; '0' for a run that had no model: recorded on
--      the run and its batch only)  19 notify routes
--      20 expected previous verdict ('' none)  21 expected previous target
--      22 expected batch id ('' none)  23 mode: 'report' or 'repeat'
--      24 the repeated run (mode repeat)  25 the report's fingerprint ('' none)
--      26 template id  27 template JSON  28 now, microseconds since the epoch
--      29 how long a run id stays recorded after its entry leaves the history, us
--      30 how long the repeated run's report is kept after this repeat, ms
--   31-40 the history entry's values (retention.ENTRY_FIELDS order)  41 run_ttl, s
--      42 the set run this run is a policy's run of ('' none: a run of its own)
--      43 a set run's policies as JSON {name: check id} ('' none), kept on its check
--      44 how long a finished batch none of whose runs changed a verdict is kept, s
--      45 '1' when this run changed its check's verdict (a first verdict included)
--      20 the set run's hash (ARGV 42; a placeholder otherwise)
--
-- A policy's run inside a set run (ARGV 42) takes no P:runs record of its own: until its set
-- run is recorded, a mark on the set run's hash ('r:' .. run id) says it is recorded; after,
-- the set run's record does (the store finds the policy run through it: store.py).
-- Returns 1 recorded, 0 the run was recorded before, -1 the check or the run changed since
-- the caller read them (KEYS 11-19 may be the wrong keys now): read again and retry.
local run, check, history, templates = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local runs, expiring = KEYS[9], KEYS[10]
local set_run, set_hash = ARGV[42], KEYS[20]
local problem = first_type_problem({run, 'hash', check, 'hash', history, 'stream',
  templates, 'hash', KEYS[5], 'zset', KEYS[6], 'stream', KEYS[7], 'zset', runs, 'hash',
  expiring, 'zset', set_hash, 'hash'})
if problem then return conflict(problem) end
if redis.call('HEXISTS', runs, ARGV[1]) == 1 or redis.call('HEXISTS', run, 'verdict') == 1 then
  return 0
end
if set_run ~= '' and (redis.call('HEXISTS', runs, set_run) == 1
    or redis.call('HEXISTS', set_hash, 'r:' .. ARGV[1]) == 1) then
  return 0
end

local run_id, check_id, target, kind = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local counts = ARGV[18] == '1'
local repeating = ARGV[23] == 'repeat'
local prev = redis.call('HMGET', check, 'verdict_kind', 'finished_ms', 'target', 'rep', 'rfp')
local prev_kind, prev_target = prev[1] or '', prev[3] or ''
if prev_kind ~= ARGV[20] or (prev_kind ~= '' and prev_target ~= ARGV[21]) then
  return -1
end
local batch_id = redis.call('HGET', run, 'batch_id') or ''
if batch_id ~= ARGV[22] then
  return -1
end
-- Where the run's id sits in its batch's runs list: its row takes its place there.
local batch_pos = redis.call('HGET', run, 'batch_pos')
if batch_pos and not string.match(batch_pos, '^%d+$') then
  return conflict('field batch_pos of key ' .. run .. ' is not an integer')
end
local prev_ms = 0
if prev_kind ~= '' then
  prev_ms = tonumber(prev[2] or '0')
  if not prev_ms then
    return conflict('field finished_ms of key ' .. check .. ' is not a number')
  end
end
local latest = counts and (prev_kind == '' or tonumber(ARGV[8]) >= prev_ms)
if repeating and not (latest and ARGV[25] ~= '' and prev[4] == ARGV[24]
    and prev[5] == ARGV[25]) then
  return -1
end

local function fields_of(flat)
  local out = {}
  for i = 1, #flat, 2 do out[flat[i]] = flat[i + 1] end
  return out
end

-- Everything checked before the first write.
local expected = {}
if latest then
  expected = {KEYS[11], 'set', KEYS[12], 'set', KEYS[13], 'set'}
  if prev_kind ~= '' then
    for i = 14, 16 do
      expected[#expected + 1] = KEYS[i]
      expected[#expected + 1] = 'set'
    end
  end
end
if batch_id ~= '' then
  for i = 17, 18 do
    expected[#expected + 1] = KEYS[i]
    expected[#expected + 1] = 'hash'
  end
  expected[#expected + 1] = KEYS[21]
  expected[#expected + 1] = 'list'
end
if repeating then
  expected[#expected + 1] = KEYS[19]
  expected[#expected + 1] = 'hash'
end
problem = first_type_problem(expected) or integer_problem(check, 'repeats')
if not problem and batch_id ~= '' then
  problem = integer_problem(KEYS[17], 'pending') or integer_problem(KEYS[17], kind)
end
if not problem and repeating then
  problem = integer_problem(KEYS[19], 'repeats')
end
local limit = tonumber(ARGV[10])
local leaving = {}
if counts then
  problem = problem or integer_problem(templates, '#' .. ARGV[26])
  local length = redis.call('XLEN', history)
  if length >= limit then
    leaving = redis.call('XRANGE', history, '-', '+', 'COUNT', length - limit + 1)
    for _, entry in ipairs(leaving) do
      local fields = fields_of(entry[2])
      if not problem and fields['c'] then
        problem = integer_problem(templates, '#' .. fields['c'])
      end
    end
  end
end
if problem then return conflict(problem) end

-- The run: its full report, or (a repeat) nothing of its own: the run it repeated counts it.
if repeating then
  redis.call('DEL', run)
  local repeated = KEYS[19]
  if redis.call('EXISTS', repeated) == 1 then
    redis.call('HINCRBY', repeated, 'repeats', 1)
    redis.call('HSET', repeated, 'repeated_at', ARGV[16])
    local left = redis.call('PTTL', repeated)
    if left >= 0 and left < tonumber(ARGV[30]) then
      redis.call('PEXPIRE', repeated, ARGV[30])
    end
  end
else
  redis.call('HSET', run, 'status', 'done', 'verdict', ARGV[6], 'verdict_kind', kind,
    'report', ARGV[7], 'updated_at', ARGV[16], 'run_id', run_id, 'check_id', check_id,
    'target', target)
  redis.call('HDEL', run, 'wake_at', 'request', 'batch_pos')  -- the report holds the request
  for _, field in ipairs(redis.call('HKEYS', run)) do
    if string.sub(field, 1, 2) == 'r:' then  -- its policies' marks: its record says it now
      redis.call('HDEL', run, field)
    end
  end
  redis.call('EXPIRE', run, ARGV[11])
end
redis.call('ZREM', KEYS[7], run_id)
redis.call('DEL', KEYS[8])

-- The history: one small entry per run; the verdict's wording once per template. Entries
-- that leave it take their template's count with them; their run ids stay recorded until
-- ARGV[29] after the run finished (a late redelivery still finds them), then go.
local now_us = tonumber(ARGV[28])
if counts then
  if #leaving > 0 then
    local window = tonumber(ARGV[29])
    for _, entry in ipairs(leaving) do
      local fields = fields_of(entry[2])
      local template = fields['c']
      if template and redis.call('HINCRBY', templates, '#' .. template, -1) <= 0 then
        redis.call('HDEL', templates, template, '#' .. template)
      end
      local finished = tonumber(fields['f'] or '')
      if fields['run_id'] and redis.call('HEXISTS', runs, fields['run_id']) == 1 then
        if finished and finished + window > now_us then
          redis.call('ZADD', expiring, finished + window, fields['run_id'])
        else
          redis.call('HDEL', runs, fields['run_id'])
        end
      end
    end
    redis.call('XTRIM', history, 'MAXLEN', '=', limit - 1)
  end
  local entry_id = redis.call('XADD', history, '*', 'run_id', ARGV[31], 'c', ARGV[32],
    's', ARGV[33], 'f', ARGV[34], 'd', ARGV[35], 'a', ARGV[36], 'b', ARGV[37], 'q', ARGV[38],
    't', ARGV[39], 'p', ARGV[40])
  redis.call('HSETNX', templates, ARGV[26], ARGV[27])
  redis.call('HINCRBY', templates, '#' .. ARGV[26], 1)
  if set_run == '' then
    redis.call('HSET', runs, run_id, check_id .. ' ' .. entry_id .. ' ' .. kind)
  else
    redis.call('HSET', set_hash, 'r:' .. run_id, '1')
    if redis.call('TTL', set_hash) < 0 then
      redis.call('EXPIRE', set_hash, ARGV[41])
    end
  end
  if ARGV[43] ~= '' then
    redis.call('HSET', check, 'members', ARGV[43])
  end
end
for _, gone in ipairs(redis.call('ZRANGEBYSCORE', expiring, '-inf', now_us, 'LIMIT', 0, 16)) do
  redis.call('HDEL', runs, gone)
  redis.call('ZREM', expiring, gone)
end

if latest then
  redis.call('HSET', check, 'check_id', check_id, 'kind', ARGV[12], 'text', ARGV[13],
    'target', target, 'verdict_kind', kind, 'exit_code', ARGV[5], 'run_id', run_id,
    'verdict', ARGV[6], 'finished_ms', ARGV[8], 'finished_at', ARGV[9], 'source', ARGV[17],
    'notify', ARGV[19])
  if repeating then
    redis.call('HINCRBY', check, 'repeats', 1)
  else
    redis.call('HSET', check, 'rep', run_id, 'rfp', ARGV[25], 'repeats', 0)
  end
  redis.call('ZADD', KEYS[5], ARGV[8], check_id)
  if prev_kind ~= '' then
    redis.call('SREM', KEYS[14], check_id)
    redis.call('SREM', KEYS[15], check_id)
    if prev_target ~= target then
      redis.call('SREM', KEYS[16], check_id)
    end
    if prev_kind ~= kind then
      redis.call('HSET', check, 'changed_at', ARGV[9], 'previous_verdict', prev_kind)
      redis.call('XADD', KEYS[6], 'MAXLEN', '~', ARGV[15], '*', 'check_id', check_id,
        'run_id', run_id, 'target', target, 'from', prev_kind, 'to', kind, 'at', ARGV[9],
        'notify', ARGV[19])
    end
  end
  redis.call('SADD', KEYS[11], check_id)
  redis.call('SADD', KEYS[12], check_id)
  redis.call('SADD', KEYS[13], check_id)
end

if batch_id ~= '' then
  local batch = KEYS[17]
  local pending = redis.call('HINCRBY', batch, 'pending', -1)
  redis.call('HINCRBY', batch, kind, 1)
  -- The row replaces the run's id in the batch's runs list (one copy of the id, one key
  -- fewer); a run registered without its place (an older version) writes the results hash.
  local placed = false
  if batch_pos and redis.call('LINDEX', KEYS[21], tonumber(batch_pos)) == run_id then
    redis.call('LSET', KEYS[21], tonumber(batch_pos), ARGV[14])
    placed = true
  end
  if not placed then
    redis.call('HSET', KEYS[18], run_id, ARGV[14])
  end
  if ARGV[45] == '1' then
    redis.call('HSET', batch, 'changed', '1')
  end
  -- A batch is kept run_ttl while it runs and once one of its runs changed a verdict (what
  -- an alert links to); a finished one that changed nothing, the short window a report is.
  local keep = ARGV[41]
  if pending <= 0 and redis.call('HGET', batch, 'sealed') == '1' then
    redis.call('HSETNX', batch, 'finished_at', ARGV[16])
    if redis.call('HGET', batch, 'changed') ~= '1' then
      keep = ARGV[44]
    end
  end
  for _, key in ipairs({batch, KEYS[18], KEYS[21]}) do
    redis.call('EXPIRE', key, keep)
  end
end
return 1
