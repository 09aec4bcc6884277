"""The spend guard: token and cost ceilings over many runs, enforced atomically in Redis.

A run's budget bounds one run; this bounds what a schedule spends per UTC day,
a batch in total, and the whole fleet per UTC hour (tokens) and per UTC day
(cost). Every model call of every worker goes through one Lua script
(``spend_reserve.lua``) before it is made and one after (``spend_settle.lua``);
both share ``spend_charges.lua``:

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
any worker finds the lease run out and decides nothing until
:meth:`SpendStore.release_expired` (``spend_sweep.lua``) has charged the
reservation's whole estimate as spent, once (the provider may have billed the
call; the guard errs high). The sweep is told every key it touches: the caller
reads which reservations ran out and the period records each one holds, and
the script checks they are still the same. A settle that arrives after that
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

import functools
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
from workers.fleet.lua_scripts import RedisClock, lua_source
from workers.fleet.redis_client import stream_entries, text_fields

if TYPE_CHECKING:
    import redis

    from schemas.settings import AssaySettings

MICRO = 1_000_000  # cost is counted in millionths of a dollar
EVENTS_MAXLEN = 10_000
SWEEP_PER_CALL = 64  # run-out reservations a reserve releases per sweep before it asks again
SWEEP_ROUNDS = 64  # sweeps one reserve runs (each releasing some) before it gives up
SETTLE_ATTEMPTS = 3  # reads of a reservation's period records before a settle (or a sweep)
# gives up
RECORD_KEEP_SECONDS = 24 * 3600  # a reservation's record outlives its lease by this much
HOUR_RECORD_TTL_SECONDS = 2 * 24 * 3600


def _spend_script(name: str) -> str:
    """A spend script with the charging steps it shares prepended (``spend_charges.lua``)."""
    return lua_source("spend_charges") + lua_source(name)


ScopeName = Literal["fleet-hour", "fleet-day", "schedule", "batch"]


@dataclass(frozen=True)
class Scope:
    """One ceiling's owner in one call: the fleet's hour or day, a schedule's day, a batch."""

    kind: ScopeName
    scope_id: str = ""
    day: str = ""  # YYYYMMDD (a schedule's), '' = today (UTC, at the call)
    default_tokens: int = 0
    default_cost_micro: int = 0
    ttl_seconds: int = 0
    start: int = 0  # the period's start (epoch s), 0 = worked out from the call's instant

    def period(self, now_s: int) -> tuple[str, str, str, int]:
        """Where this scope's spend is kept at ``now_s`` (epoch s): its index member (the
        period record's key after ``P:spend:``), scope, period label and period start."""
        hour_start = now_s - now_s % 3600
        hour, hour_label = _utc_hour(hour_start)
        today = hour[:8]
        day = self.day or today
        start = self.start if self.start > 0 else now_s - now_s % 86400
        if self.kind == "fleet-hour":
            return f"fleet:hour:{hour}", "fleet", hour_label, hour_start
        if self.kind == "fleet-day":
            return f"fleet:day:{today}", "fleet", day_label(day), start
        if self.kind == "schedule":
            return f"schedule:{self.scope_id}:day:{day}", "schedule", day_label(day), start
        return f"batch:{self.scope_id}", "batch", "total", now_s

    def encoded(self, member: str, scope: str, period: str, start: int, default_ttl: int) -> str:
        """The scope as the reserve script reads it (ids and days never hold ``|``)."""
        return (
            f"{self.kind}|{self.scope_id}|{self.default_tokens}|{self.default_cost_micro}|"
            f"{self.ttl_seconds or default_ttl}|{start}|{member}|{scope}|{period}"
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


@functools.lru_cache(maxsize=4)
def _utc_hour(hour_start: int) -> tuple[str, str]:
    """``YYYYMMDDHH`` and ``YYYY-MM-DDTHH`` of the UTC hour starting at ``hour_start`` (epoch
    s); worked out once an hour, not once per model call."""
    hour = datetime.fromtimestamp(hour_start, UTC)
    return hour.strftime("%Y%m%d%H"), hour.strftime("%Y-%m-%dT%H")


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


def _reserve_answer(answer: Any) -> ReserveAnswer | None:
    """What one reserve script said; None when a run-out reservation must be charged first."""
    status = _text(answer[0])
    if status == "sweep":
        return None
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
        self.redis_clock = RedisClock(client)
        self._reserve_script = client.register_script(_spend_script("spend_reserve"))
        self._settle_script = client.register_script(_spend_script("spend_settle"))
        self._sweep_script = client.register_script(_spend_script("spend_sweep"))
        self._skip_script = client.register_script(lua_source("spend_skip"))

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

    def _now_ms(self, now_ms: int | None) -> int:
        """``now_ms``, or Redis's clock when None (the one clock every worker's leases use)."""
        return int(now_ms) if now_ms is not None else self.redis_clock.now_ms()

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
        """Hold ``tokens`` / ``cost_micro`` against every scope's ceiling, in one step; while
        some reservation's lease has run out the script decides nothing, and those are
        charged first (:meth:`release_expired`), so no call is admitted on stale figures."""
        now_ms = self._now_ms(now_ms)
        keys = [
            self.inflight_key,
            self.limits_key,
            self.events_key,
            self.index_key,
            self.key("res", reservation_id),
        ]
        encoded = []
        for scope in scopes:
            member, name, period, start = scope.period(now_ms // 1000)
            keys.append(self.key(member))
            encoded.append(scope.encoded(member, name, period, start, self.history_seconds))
        args: list[Any] = [
            reservation_id,
            max(0, int(tokens)),
            int(cost_micro),
            max(1, int(lease_ms)),
            RECORD_KEEP_SECONDS,
            EVENTS_MAXLEN,
            now_ms,
            self.history_seconds,
            run_id,
            *encoded,
        ]
        for _ in range(SWEEP_ROUNDS):
            answer = _reserve_answer(self._reserve_script(keys=keys, args=args))
            if answer is not None:
                return answer
            self.release_expired(now_ms, SWEEP_PER_CALL)
        raise RuntimeError("reservations kept running out while a model call was being reserved")

    def settle(
        self, reservation_id: str, tokens: int, cost_micro: int, now_ms: int | None = None
    ) -> int:
        """Charge what the call used instead of its reservation; repeating it changes nothing."""
        (answer,) = self.settle_many([(reservation_id, tokens, cost_micro)], now_ms)
        return answer

    def settle_many(
        self, settlements: Sequence[tuple[str, int, int]], now_ms: int | None = None
    ) -> list[int]:
        """:meth:`settle` for many calls (reservation id, tokens, cost micro) in two round
        trips (the worker's background settler): one reads which period records each
        reservation holds, one settles them all."""
        answers: dict[int, int] = {}
        pending = list(range(len(settlements)))
        for _ in range(SETTLE_ATTEMPTS):
            replies = self._held_keys([settlements[index][0] for index in pending])
            now = self._now_ms(now_ms)
            pipe = self.client.pipeline(transaction=False)
            for index, held_keys in zip(pending, replies, strict=True):
                reservation_id, tokens, cost_micro = settlements[index]
                self._settle_script(
                    keys=[
                        self.inflight_key,
                        self.events_key,
                        self.key("res", reservation_id),
                        *held_keys.split(),
                    ],
                    args=[
                        reservation_id,
                        max(0, int(tokens)),
                        int(cost_micro),
                        now,
                        EVENTS_MAXLEN,
                        RECORD_KEEP_SECONDS,
                        held_keys,
                    ],
                    client=pipe,
                )
            for index, answer in zip(pending, pipe.execute(), strict=True):
                answers[index] = int(answer)
            # -2: a record appeared between the read and the settle; read it again
            pending = [index for index in pending if answers[index] == -2]
            if not pending:
                return [answers[index] for index in range(len(settlements))]
        raise RuntimeError("reservations kept changing while they were being settled")

    def _held_keys(self, reservation_ids: Sequence[str]) -> list[str]:
        """The period records each reservation holds, as its record lists them (space-separated
        keys; "" for a reservation gone), in one round trip."""
        pipe = self.client.pipeline(transaction=False)
        for reservation_id in reservation_ids:
            pipe.hget(self.key("res", reservation_id), "keys")
        return ["" if held is None else _text(held) for held in pipe.execute()]

    def release_expired(self, now_ms: int | None = None, count: int = 1000) -> int:
        """Charge up to ``count`` reservations whose lease ran out (a reserve asks for it when
        one is due); returns how many it released. Two reads (which ran out, the period
        records each holds), then one script given all those keys."""
        now = self._now_ms(now_ms)
        released = 0
        for _ in range(SETTLE_ATTEMPTS):
            ids = [
                _text(i)
                for i in self.client.zrangebyscore(self.inflight_key, "-inf", now, 0, count)
            ]
            if not ids:
                return released
            keys = [self.inflight_key, self.events_key]
            args: list[Any] = [now, EVENTS_MAXLEN, RECORD_KEEP_SECONDS]
            for reservation_id, held in zip(ids, self._held_keys(ids), strict=True):
                period_keys = held.split()
                keys += [self.key("res", reservation_id), *period_keys]
                args += [reservation_id, len(period_keys)]
            done, changed = self._sweep_script(keys=keys, args=args)
            released += int(done)
            if not int(changed):
                return released
        raise RuntimeError("reservations kept changing while they were being charged")

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
        member = f"schedule:{schedule_id}:day:{day}"
        start = int(datetime.strptime(day, "%Y%m%d").replace(tzinfo=UTC).timestamp())
        answer = self._skip_script(
            keys=[self.key(member), self.index_key],
            args=[
                schedule_id,
                tokens,
                cost,
                max(0, int(instants)),
                day_label(day),
                start,
                self.history_seconds,
                member,
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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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
