"""The spend guard: token and cost ceilings over many runs, enforced atomically in Redis.

A run's budget bounds one run; this bounds what a schedule spends per UTC day,
a batch in total, and the whole fleet per UTC hour (tokens) and per UTC day
(cost). Every model call of every worker goes through one Lua script
(:attr:`SpendStore._reserve_script`) before it is made and one after
(:attr:`SpendStore._settle_script`):

* **reserve** holds the call's estimate (its padded prompt count plus its
  ``max_tokens``; its cost when the model's price is known) against every
  ceiling that applies, in one step. A call is admitted when, for each ceiling,
  ``spent + reserved + estimate <= limit``. When only other calls' reservations
  stand in the way (``spent + estimate <= limit``) the call waits for them to
  settle, within its run's deadline; when spend alone leaves no room the ceiling
  is *reached*: the call is refused and its run ends ``cannot_determine``;
* **settle** replaces the reservation by what the call really used.

So spend passes a ceiling only when admitted calls use more than their
estimate (a provider that ignores ``max_tokens`` or counts the prompt well
above litellm's tokenizer): the overshoot is bounded by the calls in flight
(docs/fleet.md, "Spend guard").

Reservations have a lease (the run's deadline plus ``spend_lease_margin_seconds``,
on Redis's clock). A worker killed mid-call never settles: the next reserve of
any worker (or :meth:`SpendStore.release_expired`) finds the lease run out and
charges the reservation's whole estimate as spent, once (the provider may have
billed the call; the guard errs high). A settle that arrives after that
corrects the charge to the real figure; a settle repeated (a retry after a lost
reply) changes nothing. Nothing is lost, nothing counted twice.

Keys (``P`` = settings.key_prefix); this module is the only code that touches them::

    P:spend:limits                      hash   schedule:{id} -> "TOKENS COST_MICRO" (0 = none):
                                               a schedule's own ceilings (its record is the
                                               schedule's; scheduler/schedules.py keeps this
                                               in step)
    P:spend:fleet:hour:{YYYYMMDDHH}     hash   a period record (below)           TTL 2 days
    P:spend:fleet:day:{YYYYMMDD}        hash   a period record          TTL spend_history_days
    P:spend:schedule:{id}:day:{YYYYMMDD} hash  a period record, plus skipped (fires the
                                               scheduler skipped)       TTL spend_history_days
    P:spend:batch:{id}                  hash   a period record (the batch's total), plus
                                               own (its own ceilings are set)   TTL run_ttl
    P:spend:inflight                    zset   reservation id -> lease end (Redis clock, ms)
    P:spend:res:{id}                    hash   keys (the period records it holds, space-
                                               separated), tokens, cost, run (its run id),
                                               state (held | expired | settled)
                                                                    TTL lease + a day
    P:spend:events                      stream a ceiling at 80% / 100%: scope, scope_id,
                                               period, resource, threshold, spent, limit, at;
                                               the notifier reads it through its consumer
                                               groups (workers/fleet/notify_feed.py)
    P:spend:index                       zset   period record (key without "P:spend:") ->
                                               period start (epoch s), for `assay spend`

A period record: tokens, cost (micro-USD, each call rounded up), unpriced (calls
whose price is unknown), calls, refused, expired and expired_tokens (reservations
of stopped workers, charged in full), reserved_tokens, reserved_cost,
limit_tokens, limit_cost (the ceilings in force at the last reservation; 0 = none),
reached_at (epoch ms of the first refusal), alerted:{tokens|cost}:{80|100}, and
scope, scope_id, period (what it is, for events and reports).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from schemas.spend import (
    CeilingState,
    ScopeKind,
    ScopeSpend,
    SpendCeiling,
    SpendEventData,
    dollars,
)
from workers.fleet.redis_client import stream_entries, text_fields

if TYPE_CHECKING:
    import redis

    from schemas.settings import AssaySettings

MICRO = 1_000_000  # cost is counted in millionths of a dollar
EVENTS_MAXLEN = 10_000
SWEEP_PER_CALL = 64  # expired reservations one reserve releases before it checks
RECORD_KEEP_SECONDS = 24 * 3600  # a reservation's record outlives its lease by this much
HOUR_RECORD_TTL_SECONDS = 2 * 24 * 3600

# Shared by every script: the UTC calendar from epoch seconds (Redis's Lua has no os.date),
# the event a crossed threshold adds, and charging a period record.
_PRELUDE = """
local function civil(epoch_s)
  local days = math.floor(epoch_s / 86400)
  local hour = math.floor((epoch_s - days * 86400) / 3600)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local y = yoe + era * 400
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp + 3
  if mp >= 10 then m = mp - 9 end
  if m <= 2 then y = y + 1 end
  return y, m, d, hour
end
local function now_ms_of(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function num(v)
  return tonumber(v or '0') or 0
end
-- a period record's field, and its name in events
local RESOURCES = {{'tokens', 'tokens'}, {'cost', 'cost_usd'}}
-- Add an event for each threshold of `key` that spend has crossed, once per record. One read
-- decides; an event costs a few more commands, once per threshold and period.
local function thresholds(key, events, maxlen, now_ms, refused_resource)
  local f = redis.call('HMGET', key, 'tokens', 'cost', 'limit_tokens', 'limit_cost',
    'alerted:tokens:80', 'alerted:tokens:100', 'alerted:cost:80', 'alerted:cost:100')
  for i, r in ipairs(RESOURCES) do
    local spent, limit = num(f[i]), num(f[i + 2])
    if limit > 0 then
      local marks = {}
      if spent >= 0.8 * limit and not f[3 + 2 * i] then marks[#marks + 1] = 80 end
      if (spent >= limit or refused_resource == r[1]) and not f[4 + 2 * i] then
        marks[#marks + 1] = 100
      end
      for _, mark in ipairs(marks) do
        if redis.call('HSETNX', key, 'alerted:' .. r[1] .. ':' .. mark, now_ms) == 1 then
          local meta = redis.call('HMGET', key, 'scope', 'scope_id', 'period')
          redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*',
            'scope', meta[1] or '', 'scope_id', meta[2] or '', 'period', meta[3] or '',
            'resource', r[2], 'threshold', mark, 'spent', spent, 'limit', limit, 'at', now_ms)
        end
      end
    end
  end
end
local function charge(key, tokens, cost, events, maxlen, now_ms)
  redis.call('HINCRBY', key, 'tokens', tokens)
  if cost then redis.call('HINCRBY', key, 'cost', cost) end
  thresholds(key, events, maxlen, now_ms, nil)
end
local function split(text)
  local out = {}
  for part in string.gmatch(text or '', '%S+') do out[#out + 1] = part end
  return out
end
-- A reservation whose lease ran out: its worker stopped mid-call. Charged in full, once.
local function expire(prefix, inflight, id, events, maxlen, now_ms, keep_s)
  local rec = prefix .. ':spend:res:' .. id
  local f = redis.call('HMGET', rec, 'keys', 'tokens', 'cost', 'state')
  redis.call('ZREM', inflight, id)
  if not f[1] or f[4] ~= 'held' then return end
  local tokens, cost = num(f[2]), tonumber(f[3])
  for _, key in ipairs(split(f[1])) do
    redis.call('HINCRBY', key, 'reserved_tokens', -tokens)
    if cost and cost >= 0 then
      redis.call('HINCRBY', key, 'reserved_cost', -cost)
      charge(key, tokens, cost, events, maxlen, now_ms)
    else
      charge(key, tokens, nil, events, maxlen, now_ms)
    end
    redis.call('HINCRBY', key, 'expired', 1)
    redis.call('HINCRBY', key, 'expired_tokens', tokens)
  end
  redis.call('HSET', rec, 'state', 'expired')
  redis.call('EXPIRE', rec, keep_s)
end
local function sweep(prefix, inflight, events, maxlen, now_ms, keep_s, count)
  local due = redis.call('ZRANGEBYSCORE', inflight, '-inf', now_ms, 'LIMIT', 0, count)
  for _, id in ipairs(due) do
    expire(prefix, inflight, id, events, maxlen, now_ms, keep_s)
  end
  return #due
end
"""

# KEYS: 1 inflight, 2 limits, 3 events, 4 index, 5 reservation record
# ARGV: 1 reservation id, 2 tokens, 3 cost micro (-1: price unknown), 4 lease ms, 5 prefix,
#       6 record keep s, 7 events maxlen, 8 now ms ('' = Redis's clock), 9 sweep count,
#       10 history s, 11 run id, then one per scope, its 7 parts joined by '|': kind
#       (fleet-hour | fleet-day | schedule | batch), scope id, day YYYYMMDD ('' = today),
#       default tokens, default cost micro (0 = none), record TTL s, period start epoch s
#       (0 = now's); the fleet's ceilings are its defaults. (One argument per scope: each
#       argument costs the caller time to send.)
# Returns {'ok'} | {'wait', label, resource, spent, reserved, limit}
#       | {'refused', label, resource, spent, limit}.
_RESERVE_LUA = (
    _PRELUDE
    + """
local inflight, limits, events, index, rec = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local id, want_t, want_c = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local lease_ms, prefix, keep_s, maxlen = tonumber(ARGV[4]), ARGV[5], tonumber(ARGV[6]), ARGV[7]
local now_ms = now_ms_of(ARGV[8])
sweep(prefix, inflight, events, maxlen, now_ms, keep_s, tonumber(ARGV[9]))
local now_s = math.floor(now_ms / 1000)
local y, m, d, h = civil(now_s)
local today = string.format('%04d%02d%02d', y, m, d)
local scopes = {}
for a = 12, #ARGV do
  local kind, sid, day, lt, lc, ttl, start = string.match(ARGV[a],
    '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)$')
  local s = {kind = kind, sid = sid, lt = num(lt), lc = num(lc), ttl = tonumber(ttl),
    start = num(start)}
  if s.start <= 0 then s.start = now_s - (now_s % 86400) end
  if day == '' then day = today end
  local dy, dm, dd = tonumber(string.sub(day, 1, 4)), tonumber(string.sub(day, 5, 6)),
    tonumber(string.sub(day, 7, 8))
  local label = string.format('%04d-%02d-%02d', dy, dm, dd)
  if kind == 'fleet-hour' then
    s.member = 'fleet:hour:' .. today .. string.format('%02d', h)
    s.scope, s.period = 'fleet', string.format('%04d-%02d-%02dT%02d', y, m, d, h)
    s.start = now_s - (now_s % 3600)
  elseif kind == 'fleet-day' then
    s.member, s.scope, s.period = 'fleet:day:' .. today, 'fleet', label
  elseif kind == 'schedule' then
    s.member, s.scope, s.period = 'schedule:' .. sid .. ':day:' .. day, 'schedule', label
    local own = redis.call('HGET', limits, 'schedule:' .. sid)
    if own then
      local parts = split(own)
      s.lt, s.lc = num(parts[1]), num(parts[2])
    end
  else
    s.member, s.scope, s.period = 'batch:' .. sid, 'batch', 'total'
    s.start = now_s
  end
  s.key = prefix .. ':spend:' .. s.member
  if kind == 'batch' then
    local own = redis.call('HMGET', s.key, 'own', 'limit_tokens', 'limit_cost')
    if own[1] == '1' then s.lt, s.lc = num(own[2]), num(own[3]) end
  end
  scopes[#scopes + 1] = s
end
local wait = nil
for _, s in ipairs(scopes) do
  local f = redis.call('HMGET', s.key, 'tokens', 'cost', 'reserved_tokens', 'reserved_cost',
    'limit_tokens', 'limit_cost', 'scope')
  local spent_t, spent_c, res_t, res_c = num(f[1]), num(f[2]), num(f[3]), num(f[4])
  s.fresh = not f[7] or num(f[5]) ~= s.lt or num(f[6]) ~= s.lc
  local checks = {{'tokens', s.lt, spent_t, res_t, want_t}}
  if want_c >= 0 then checks[2] = {'cost', s.lc, spent_c, res_c, want_c} end
  for _, c in ipairs(checks) do
    local resource, limit, spent, reserved, want = c[1], c[2], c[3], c[4], c[5]
    if limit > 0 and spent + want > limit then
      redis.call('HSET', s.key, 'scope', s.scope, 'scope_id', s.sid, 'period', s.period,
        'limit_tokens', s.lt, 'limit_cost', s.lc)
      redis.call('HINCRBY', s.key, 'refused', 1)
      redis.call('HSETNX', s.key, 'reached_at', now_ms)
      thresholds(s.key, events, maxlen, now_ms, resource)
      redis.call('EXPIRE', s.key, s.ttl)
      redis.call('ZADD', index, 'NX', s.start, s.member)
      return {'refused', s.kind .. ':' .. s.sid .. ':' .. s.period, resource, tostring(spent),
        tostring(limit)}
    end
    if not wait and limit > 0 and spent + reserved + want > limit then
      wait = {'wait', s.kind .. ':' .. s.sid .. ':' .. s.period, resource, tostring(spent),
        tostring(reserved), tostring(limit)}
    end
  end
end
if wait then return wait end
local keys = {}
local created = false
for _, s in ipairs(scopes) do
  redis.call('HINCRBY', s.key, 'reserved_tokens', want_t)
  if want_c >= 0 then
    redis.call('HINCRBY', s.key, 'reserved_cost', want_c)
  else
    redis.call('HINCRBY', s.key, 'unpriced', 1)
  end
  if redis.call('HINCRBY', s.key, 'calls', 1) == 1 then
    created = true
    redis.call('EXPIRE', s.key, s.ttl)
    redis.call('ZADD', index, 'NX', s.start, s.member)
  end
  if s.fresh then  -- a new record, or new ceilings since its last call
    redis.call('HSET', s.key, 'scope', s.scope, 'scope_id', s.sid, 'period', s.period,
      'limit_tokens', s.lt, 'limit_cost', s.lc)
  end
  keys[#keys + 1] = s.key
end
if created then
  redis.call('ZREMRANGEBYSCORE', index, '-inf', now_s - tonumber(ARGV[10]))
end
redis.call('HSET', rec, 'keys', table.concat(keys, ' '), 'tokens', want_t, 'cost', want_c,
  'run', ARGV[11], 'state', 'held')
redis.call('EXPIRE', rec, math.ceil(lease_ms / 1000) + keep_s)
redis.call('ZADD', inflight, now_ms + lease_ms, id)
return {'ok'}
"""
)

# KEYS: 1 inflight, 2 events, 3 reservation record
# ARGV: 1 reservation id, 2 tokens used, 3 cost micro used (-1: price unknown),
#       4 now ms ('' = Redis's clock), 5 events maxlen, 6 record keep s
# Returns 1 settled, 0 settled before (nothing changed), -1 no such reservation (its record
# outlived its lease by a day and is gone).
_SETTLE_LUA = (
    _PRELUDE
    + """
local inflight, events, rec = KEYS[1], KEYS[2], KEYS[3]
local id, used_t, used_c = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now_ms, maxlen, keep_s = now_ms_of(ARGV[4]), ARGV[5], tonumber(ARGV[6])
local f = redis.call('HMGET', rec, 'keys', 'tokens', 'cost', 'state')
if not f[1] then return -1 end
if f[4] == 'settled' then return 0 end
local held_t, held_c = num(f[2]), tonumber(f[3]) or -1
local held = redis.call('ZREM', inflight, id) == 1 and f[4] == 'held'
for _, key in ipairs(split(f[1])) do
  local cost = nil
  if held then
    redis.call('HINCRBY', key, 'reserved_tokens', -held_t)
    if held_c >= 0 then redis.call('HINCRBY', key, 'reserved_cost', -held_c) end
    if used_c >= 0 then cost = used_c end
    charge(key, used_t, cost, events, maxlen, now_ms)
  else
    -- its lease ran out first and charged the whole estimate: correct it to what was used
    if used_c >= 0 and held_c >= 0 then cost = used_c - held_c end
    charge(key, used_t - held_t, cost, events, maxlen, now_ms)
  end
end
redis.call('HSET', rec, 'state', 'settled')
redis.call('EXPIRE', rec, keep_s)
return 1
"""
)

# KEYS: 1 inflight, 2 events.  ARGV: 1 prefix, 2 now ms ('' = Redis's clock), 3 maxlen,
#       4 record keep s, 5 count.  Returns how many reservations it found expired.
_SWEEP_LUA = (
    _PRELUDE
    + """
return sweep(ARGV[1], KEYS[1], KEYS[2], ARGV[3], now_ms_of(ARGV[2]), tonumber(ARGV[4]),
  tonumber(ARGV[5]))
"""
)

# KEYS: 1 the schedule's day record, 2 index
# ARGV: 1 schedule id, 2 tokens ceiling, 3 cost ceiling micro (0 = none), 4 instants to skip,
#       5 period label (YYYY-MM-DD), 6 period start (epoch s), 7 record TTL s, 8 key prefix
#       of period records ("P:spend:")
# The schedule's ceiling for that day is reached (a call was refused, or spend reached it):
# counts the skipped instants and returns {'reached', resource, spent, limit, skipped that day};
# else {}.
_SKIP_LUA = """
local function num(v) return tonumber(v or '0') or 0 end
local lt, lc = num(ARGV[2]), num(ARGV[3])
if lt <= 0 and lc <= 0 then return {} end
local f = redis.call('HMGET', KEYS[1], 'tokens', 'cost', 'reached_at')
local spent_t, spent_c = num(f[1]), num(f[2])
local reason = nil
if lt > 0 and spent_t >= lt then
  reason = {'reached', 'tokens', tostring(spent_t), tostring(lt)}
elseif lc > 0 and spent_c >= lc then
  reason = {'reached', 'cost_usd', tostring(spent_c), tostring(lc)}
elseif f[3] then
  reason = {'reached', 'refused', tostring(spent_t), tostring(lt)}
end
if not reason then return {} end
redis.call('HSET', KEYS[1], 'scope', 'schedule', 'scope_id', ARGV[1], 'period', ARGV[5],
  'limit_tokens', lt, 'limit_cost', lc)
local total = redis.call('HINCRBY', KEYS[1], 'skipped', tonumber(ARGV[4]))
redis.call('EXPIRE', KEYS[1], tonumber(ARGV[7]))
redis.call('ZADD', KEYS[2], 'NX', tonumber(ARGV[6]), string.sub(KEYS[1], #ARGV[8] + 1))
reason[5] = tostring(total)
return reason
"""


ScopeName = Literal["fleet-hour", "fleet-day", "schedule", "batch"]


@dataclass(frozen=True)
class Scope:
    """One ceiling's owner in one call: the fleet's hour or day, a schedule's day, a batch."""

    kind: ScopeName
    scope_id: str = ""
    day: str = ""  # YYYYMMDD (a schedule's), '' = today by Redis's clock
    default_tokens: int = 0
    default_cost_micro: int = 0
    ttl_seconds: int = 0
    start: int = 0  # the period's start (epoch s), 0 = worked out by the script

    def encoded(self, default_ttl: int) -> str:
        """The scope as the reserve script reads it (ids and days never hold ``|``)."""
        return (
            f"{self.kind}|{self.scope_id}|{self.day}|{self.default_tokens}|"
            f"{self.default_cost_micro}|{self.ttl_seconds or default_ttl}|{self.start}"
        )


@dataclass(frozen=True)
class ReserveAnswer:
    """What the reserve script said: ``ok``, ``wait`` (other calls hold the room) or
    ``refused`` (spend alone leaves none: the ceiling is reached)."""

    status: Literal["ok", "wait", "refused"]
    ceiling: str = ""  # kind:id:period of the ceiling that answered
    resource: str = ""
    spent: int = 0
    reserved: int = 0
    limit: int = 0


@dataclass(frozen=True)
class SkipAnswer:
    """A schedule fire skipped for its day's ceiling: why, and how many that day so far."""

    reason: str
    skipped_today: int


def micro_usd(cost_usd: float | None) -> int:
    """Dollars as whole millionths, rounded up (-1 for an unknown price)."""
    if cost_usd is None or not math.isfinite(cost_usd):
        return -1
    return max(0, math.ceil(cost_usd * MICRO - 1e-9))


def utc_day(instant: datetime) -> str:
    """``YYYYMMDD`` of ``instant``'s UTC day: the period of a schedule's spend."""
    return instant.astimezone(UTC).strftime("%Y%m%d")


def day_start(instant: datetime) -> int:
    """The epoch second ``instant``'s UTC day starts at."""
    utc = instant.astimezone(UTC)
    return int(utc.replace(hour=0, minute=0, second=0, microsecond=0).timestamp())


def day_label(day: str) -> str:
    return f"{day[:4]}-{day[4:6]}-{day[6:8]}"


def _ceiling_pair(ceiling: SpendCeiling | None) -> tuple[int, int]:
    if ceiling is None:
        return 0, 0
    return ceiling.tokens or 0, ceiling_cost(ceiling.cost_usd)


class SpendStore:
    """The ``P:spend:*`` keys: reservations, period records, ceilings, events, the index."""

    def __init__(
        self,
        client: redis.Redis,
        prefix: str,
        *,
        history_days: int = 35,
        batch_ttl_seconds: int = 30 * 24 * 3600,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self.history_seconds = history_days * 24 * 3600
        self.batch_ttl_seconds = batch_ttl_seconds
        self.inflight_key = self.key("inflight")
        self.limits_key = self.key("limits")
        self.events_key = events_key(prefix)
        self.index_key = self.key("index")
        self._reserve_script = client.register_script(_RESERVE_LUA)
        self._settle_script = client.register_script(_SETTLE_LUA)
        self._sweep_script = client.register_script(_SWEEP_LUA)
        self._skip_script = client.register_script(_SKIP_LUA)

    @classmethod
    def from_settings(cls, settings: AssaySettings, client: redis.Redis) -> SpendStore:
        return cls(
            client,
            settings.key_prefix,
            history_days=settings.spend_history_days,
            batch_ttl_seconds=settings.run_ttl_seconds,
        )

    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, "spend", *parts))

    # --- one model call -----------------------------------------------------------------------
    def reserve(
        self,
        reservation_id: str,
        tokens: int,
        cost_micro: int,
        lease_ms: int,
        scopes: Sequence[Scope],
        now_ms: int | None = None,
        run_id: str = "",
    ) -> ReserveAnswer:
        """Hold ``tokens`` / ``cost_micro`` against every scope's ceiling, in one step."""
        args: list[Any] = [
            reservation_id,
            max(0, int(tokens)),
            int(cost_micro),
            max(1, int(lease_ms)),
            self.prefix,
            RECORD_KEEP_SECONDS,
            EVENTS_MAXLEN,
            "" if now_ms is None else int(now_ms),
            SWEEP_PER_CALL,
            self.history_seconds,
            run_id,
            *(scope.encoded(self.history_seconds) for scope in scopes),
        ]
        answer = self._reserve_script(
            keys=[
                self.inflight_key,
                self.limits_key,
                self.events_key,
                self.index_key,
                self.key("res", reservation_id),
            ],
            args=args,
        )
        status = str(answer[0])
        if status == "ok":
            return ReserveAnswer("ok")
        if status == "wait":
            return ReserveAnswer(
                "wait",
                str(answer[1]),
                str(answer[2]),
                _int(answer[3]),
                _int(answer[4]),
                _int(answer[5]),
            )
        return ReserveAnswer(
            "refused", str(answer[1]), str(answer[2]), _int(answer[3]), 0, _int(answer[4])
        )

    def settle(
        self, reservation_id: str, tokens: int, cost_micro: int, now_ms: int | None = None
    ) -> int:
        """Charge what the call used instead of its reservation; repeating it changes nothing."""
        return int(
            self._settle_script(*self._settlement(reservation_id, tokens, cost_micro, now_ms))
        )

    def _settlement(
        self, reservation_id: str, tokens: int, cost_micro: int, now_ms: int | None
    ) -> tuple[list[str], list[Any]]:
        """The settle script's keys and arguments for one call."""
        keys = [self.inflight_key, self.events_key, self.key("res", reservation_id)]
        args = [
            reservation_id,
            max(0, int(tokens)),
            int(cost_micro),
            "" if now_ms is None else int(now_ms),
            EVENTS_MAXLEN,
            RECORD_KEEP_SECONDS,
        ]
        return keys, args

    def settle_many(self, settlements: Sequence[tuple[str, int, int]]) -> list[int]:
        """:meth:`settle` for many calls (reservation id, tokens, cost micro) in one round
        trip (the worker's background settler)."""
        pipe = self.client.pipeline(transaction=False)
        for reservation_id, tokens, cost_micro in settlements:
            self._settle_script(
                *self._settlement(reservation_id, tokens, cost_micro, None), client=pipe
            )
        return [int(answer) for answer in pipe.execute()]

    def release_expired(self, now_ms: int | None = None, count: int = 1000) -> int:
        """Charge every reservation whose lease ran out (what each reserve also does first)."""
        return int(
            self._sweep_script(
                keys=[self.inflight_key, self.events_key],
                args=[
                    self.prefix,
                    "" if now_ms is None else int(now_ms),
                    EVENTS_MAXLEN,
                    RECORD_KEEP_SECONDS,
                    count,
                ],
            )
        )

    def in_flight(self) -> int:
        """Reservations held now (calls in flight, and leases not yet found run out)."""
        return int(self.client.zcard(self.inflight_key))

    # --- ceilings ---------------------------------------------------------------------------
    def set_schedule_ceiling(
        self, schedule_id: str, ceiling: SpendCeiling | None, reopen_day: str | None = None
    ) -> None:
        """A schedule's own ceilings (None: the fleet's defaults apply).

        ``reopen_day`` (a changed ceiling, ``YYYYMMDD``): that day's mark that a call was
        refused is cleared, so its fires run again if the new ceiling has room (what was
        spent stays counted)."""
        field = f"schedule:{schedule_id}"
        pipe = self.client.pipeline(transaction=True)
        if ceiling is None:
            pipe.hdel(self.limits_key, field)
        else:
            tokens, cost = _ceiling_pair(ceiling)
            pipe.hset(self.limits_key, field, f"{tokens} {cost}")
        if reopen_day is not None:
            pipe.hdel(self._schedule_day_key(schedule_id, reopen_day), "reached_at")
        pipe.execute()

    def sync_schedule_ceilings(self, ceilings: dict[str, SpendCeiling | None]) -> int:
        """Make the stored ceilings match ``ceilings`` (schedule id -> its own), in two round
        trips; returns how many were out of step (the scheduler's periodic reconcile)."""
        if not ceilings:
            return 0
        ids = list(ceilings)
        stored = self.client.hmget(self.limits_key, [f"schedule:{i}" for i in ids])
        pipe = self.client.pipeline(transaction=False)
        fixed = 0
        for schedule_id, current in zip(ids, stored, strict=True):
            ceiling = ceilings[schedule_id]
            want = None if ceiling is None else "{} {}".format(*_ceiling_pair(ceiling))
            if (None if current is None else str(current)) == want:
                continue
            fixed += 1
            if want is None:
                pipe.hdel(self.limits_key, f"schedule:{schedule_id}")
            else:
                pipe.hset(self.limits_key, f"schedule:{schedule_id}", want)
        if fixed:
            pipe.execute()
        return fixed

    def forget_schedule(self, schedule_id: str) -> None:
        self.client.hdel(self.limits_key, f"schedule:{schedule_id}")

    def set_batch_ceiling(self, batch_id: str, ceiling: SpendCeiling) -> None:
        """A batch's own ceilings over all its runs; set before any of its runs is sent."""
        tokens, cost = _ceiling_pair(ceiling)
        key = self.key("batch", batch_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.hset(
            key,
            mapping={
                "own": "1",
                "limit_tokens": tokens,
                "limit_cost": cost,
                "scope": "batch",
                "scope_id": batch_id,
                "period": "total",
            },
        )
        pipe.expire(key, self.batch_ttl_seconds)
        pipe.zadd(self.index_key, {f"batch:{batch_id}": int(time.time())}, nx=True)
        pipe.execute()

    # --- the scheduler ------------------------------------------------------------------------
    def skip_if_reached(
        self,
        schedule_id: str,
        day: str,
        instants: int,
        ceiling: SpendCeiling | None,
    ) -> SkipAnswer | None:
        """When the schedule's ``ceiling`` for ``day`` is reached: count ``instants`` skipped
        fires and say why; None: fire as usual (no round trip without a ceiling)."""
        if ceiling is None:
            return None
        tokens, cost = _ceiling_pair(ceiling)
        key = self._schedule_day_key(schedule_id, day)
        start = int(datetime.strptime(day, "%Y%m%d").replace(tzinfo=UTC).timestamp())
        answer = self._skip_script(
            keys=[key, self.index_key],
            args=[
                schedule_id,
                tokens,
                cost,
                max(0, int(instants)),
                day_label(day),
                start,
                self.history_seconds,
                self.key(""),
            ],
        )
        if not answer:
            return None
        _, resource, spent, limit, total = (str(part) for part in answer)
        label = day_label(day)
        if resource == "cost_usd":
            reason = (
                f"its cost ceiling of {dollars(_int(limit) / MICRO)} per UTC day is reached on "
                f"{label} (${_int(spent) / MICRO:,.4f} spent)"
            )
        elif resource == "tokens":
            reason = (
                f"its token ceiling of {_int(limit):,} per UTC day is reached on {label} "
                f"({_int(spent):,} spent)"
            )
        else:
            reason = f"its spend ceiling stopped a model call on {label} (UTC)"
        return SkipAnswer(reason, _int(total))

    def _schedule_day_key(self, schedule_id: str, day: str) -> str:
        return self.key("schedule", schedule_id, "day", day)

    # --- reading ----------------------------------------------------------------------------
    def schedule_day(self, schedule_id: str, day: str) -> ScopeSpend:
        """A schedule's spend on one UTC day (empty when nothing happened)."""
        (spend,) = self.schedule_days([schedule_id], day)
        return spend

    def schedule_days(self, schedule_ids: Sequence[str], day: str) -> list[ScopeSpend]:
        """:meth:`schedule_day` of many schedules in one round trip (the gauges' scrape)."""
        members = [f"schedule:{schedule_id}:day:{day}" for schedule_id in schedule_ids]
        pipe = self.client.pipeline(transaction=False)
        for member in members:
            pipe.hgetall(self.key(member))
        rows = pipe.execute()
        return [_scope_spend(m, text_fields(r)) for m, r in zip(members, rows, strict=True)]

    def batch_spends(self, batch_ids: Sequence[str]) -> list[ScopeSpend | None]:
        """:meth:`batch_spend` of many batches in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for batch_id in batch_ids:
            pipe.hgetall(self.key("batch", batch_id))
        rows = [text_fields(row) for row in pipe.execute()]
        return [
            _scope_spend(f"batch:{batch_id}", row) if row else None
            for batch_id, row in zip(batch_ids, rows, strict=True)
        ]

    def batch_spend(self, batch_id: str) -> ScopeSpend | None:
        member = f"batch:{batch_id}"
        row = text_fields(self.client.hgetall(self.key(member)))
        return _scope_spend(member, row) if row else None

    def fleet_now(self, now: datetime | None = None) -> list[ScopeSpend]:
        """The fleet's current UTC hour and day, as recorded (empty records when idle)."""
        now = (now or datetime.now(UTC)).astimezone(UTC)
        members = [f"fleet:hour:{now:%Y%m%d%H}", f"fleet:day:{now:%Y%m%d}"]
        pipe = self.client.pipeline(transaction=False)
        for member in members:
            pipe.hgetall(self.key(member))
        rows = pipe.execute()
        return [_scope_spend(m, text_fields(r)) for m, r in zip(members, rows, strict=True)]

    def report(self, days: int, now: datetime | None = None) -> list[ScopeSpend]:
        """Every day record (fleet and schedules) and batch of the last ``days`` UTC days,
        newest first; the fleet's hours are left out (its day holds their sum)."""
        now = (now or datetime.now(UTC)).astimezone(UTC)
        since = int(
            (now - timedelta(days=max(1, days) - 1))
            .replace(hour=0, minute=0, second=0, microsecond=0)
            .timestamp()
        )
        members = [
            str(m)
            for m in self.client.zrangebyscore(self.index_key, since, "+inf")
            if not str(m).startswith("fleet:hour:")
        ]
        pipe = self.client.pipeline(transaction=False)
        for member in members:
            pipe.hgetall(self.key(member))
        rows = [
            _scope_spend(member, text_fields(row))
            for member, row in zip(members, pipe.execute(), strict=True)
            if row
        ]
        order = {"fleet": 0, "schedule": 1, "batch": 2}
        rows.sort(key=lambda r: (r.scope_id or "", order[r.scope]))
        rows.sort(key=lambda r: r.period if r.period != "total" else "", reverse=True)
        return rows

    def read_events(self, count: int = 100) -> list[SpendEventData]:
        """The newest threshold events, oldest first (the notifier reads them itself)."""
        entries = stream_entries(self.client.xrevrange(self.events_key, count=count))
        return [event_from_fields(fields) for _, fields in reversed(entries)]


def events_key(prefix: str) -> str:
    """The stream of threshold events (the notifier's consumer groups read it)."""
    return f"{prefix}:spend:events"


def event_from_fields(fields: dict[str, str]) -> SpendEventData:
    """One stream entry as event data (costs in dollars); ValueError when malformed."""
    resource = fields["resource"]
    scale = MICRO if resource == "cost_usd" else 1
    return SpendEventData.model_validate(
        {
            "scope": fields["scope"],
            "scope_id": fields.get("scope_id") or None,
            "period": fields["period"],
            "resource": resource,
            "threshold": int(fields["threshold"]),
            "spent": float(fields["spent"]) / scale,
            "limit": float(fields["limit"]) / scale,
            "at": datetime.fromtimestamp(int(fields["at"]) / 1000, UTC),
        }
    )


def _int(value: Any) -> int:
    try:
        return int(float(value))
    except (TypeError, ValueError):
        return 0


def _scope_spend(member: str, row: dict[str, Any]) -> ScopeSpend:
    """A period record as the API and the CLI show it."""
    parts = member.split(":")
    scope: ScopeKind = parts[0]  # type: ignore[assignment]
    scope_id = None if scope == "fleet" else parts[1]
    period = row.get("period") or ""
    if not period:
        raw = parts[-1]
        period = (
            "total"
            if scope == "batch"
            else day_label(raw[:8]) + (f"T{raw[8:]}" if len(raw) == 10 else "")
        )
    tokens, cost = _int(row.get("tokens")), _int(row.get("cost"))
    res_t, res_c = _int(row.get("reserved_tokens")), _int(row.get("reserved_cost"))
    limit_t, limit_c = _int(row.get("limit_tokens")), _int(row.get("limit_cost"))
    reached_at = row.get("reached_at")
    ceilings = []
    if limit_t > 0:
        ceilings.append(
            CeilingState(
                resource="tokens",
                limit=limit_t,
                spent=tokens,
                reserved=res_t,
                remaining=max(0, limit_t - tokens - res_t),
                reached=tokens >= limit_t or bool(row.get("alerted:tokens:100")),
            )
        )
    if limit_c > 0:
        ceilings.append(
            CeilingState(
                resource="cost_usd",
                limit=limit_c / MICRO,
                spent=cost / MICRO,
                reserved=res_c / MICRO,
                remaining=max(0.0, (limit_c - cost - res_c) / MICRO),
                reached=cost >= limit_c or bool(row.get("alerted:cost:100")),
            )
        )
    return ScopeSpend(
        scope=scope,
        scope_id=scope_id,
        period=period,
        tokens=tokens,
        cost_usd=cost / MICRO,
        unpriced_calls=_int(row.get("unpriced")),
        calls=_int(row.get("calls")),
        refused=_int(row.get("refused")),
        expired=_int(row.get("expired")),
        expired_tokens=_int(row.get("expired_tokens")),
        skipped_fires=_int(row.get("skipped")),
        reserved_tokens=res_t,
        ceilings=ceilings,
        reached_at=datetime.fromtimestamp(_int(reached_at) / 1000, UTC) if reached_at else None,
    )


def ceiling_cost(cost_usd: float | None) -> int:
    """A cost ceiling in millionths of a dollar, 0 for none.

    Rounded down (float noise aside: 0.29 is 290,000, not 289,999), so no ceiling lets more
    be spent than it says; and never 0 for a ceiling that is set, since 0 is "no ceiling"
    (``schemas.spend.MIN_CEILING_COST_USD`` refuses anything under one millionth)."""
    if not cost_usd:
        return 0
    return max(1, math.floor(round(cost_usd * MICRO, 3)))


def default_schedule_ceiling(settings: AssaySettings) -> SpendCeiling | None:
    """The ceiling of a schedule that sets none of its own (``spend_schedule_*``)."""
    tokens, cost = settings.spend_schedule_tokens_per_day, settings.spend_schedule_cost_usd_per_day
    return SpendCeiling(tokens=tokens, cost_usd=cost) if tokens or cost else None


def schedule_ceiling(own: SpendCeiling | None, settings: AssaySettings) -> SpendCeiling | None:
    """The ceiling a schedule's day is held to: its own, else the fleet's default."""
    return own if own is not None else default_schedule_ceiling(settings)


def batch_ceiling(own: SpendCeiling | None, settings: AssaySettings) -> SpendCeiling | None:
    """The ceiling a batch is held to: its own, else the fleet's default (``spend_batch_*``)."""
    if own is not None:
        return own
    tokens, cost = settings.spend_batch_tokens, settings.spend_batch_cost_usd
    return SpendCeiling(tokens=tokens, cost_usd=cost) if tokens or cost else None
