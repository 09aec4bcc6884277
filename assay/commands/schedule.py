"""`assay schedule ...` (periodic checks) and `assay scheduler` (run a scheduler replica).

Schedules live in Redis, so every change here takes effect on the running
replicas at their next tick, with no restart. A wrong command line (invalid
cron, unknown zone, an interval under the floor, an instant in the past)
exits 64 with one sentence saying what to fix, and creates nothing; an
unknown schedule exits 66; no reachable fleet exits 69.

Heavy modules (redis, celery, croniter via the scheduler) are imported inside
the commands so ``assay --help`` stays fast.
"""

from __future__ import annotations

# Commands import the store, fleet, engine or API inside the function that needs them:
# `assay --help` loads in about 0.3 s and each of those adds 0.3-1 s more (measured with
# `python -X importtime -c 'import assay.cli'`; tests/assay/test_cli_check.py keeps the engine out).
import json
import re
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from assay.commands.fleet_common import (
    ERROR_PREFIX,
    EXIT_INTERRUPTED,
    EXIT_UNAVAILABLE,
    WideOpt,
    iso_utc,
    require_model,
    require_reachable,
    require_routable_model,
    stdout_console,
)
from assay.commands.options import (
    PROBE_MODES,
    UNATTENDED_PROFILE_HELP,
    FleetMaxIterationsOpt,
    FleetMaxTokensOpt,
    FleetTimeoutOpt,
    ProbeOpt,
    spend_ceiling,
)
from assay.terminal_text import print_line
from scheduler.when import WhenError, parse_duration
from schemas.exit_codes import EXIT_UNKNOWN, EXIT_USAGE
from workers.fleet.redis_client import connect, shown_url

if TYPE_CHECKING:
    from scheduler.schedules import ScheduleStore
    from schemas.schedule import Schedule
    from schemas.settings import AssaySettings
    from workers.fleet.store import VerdictStore


schedule_app = typer.Typer(
    rich_markup_mode=None,  # plain help: no box drawing, no <bool> placeholders
    name="schedule",
    help="Periodic checks: add, list, show, pause, resume, remove, run-now.",
    no_args_is_help=True,
)

RefArg = Annotated[str, typer.Argument(help="Schedule id (or a unique prefix of one) or name.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]
CronOpt = Annotated[
    str | None, typer.Option("--cron", help="Cron expression, e.g. '0 6 * * 1-5' or @daily.")
]
TzOpt = Annotated[
    str | None, typer.Option("--tz", help="IANA time zone the cron is read in (default UTC).")
]
EveryOpt = Annotated[str | None, typer.Option("--every", help="Interval, e.g. 15m, 1h, 1d.")]
MisfireOpt = Annotated[
    str | None,
    typer.Option(
        "--misfire",
        help="After scheduler downtime: skip (only the next future fire) or run_once "
        "(one fire for all missed).",
    ),
]
JitterOpt = Annotated[
    str | None, typer.Option("--jitter", help="Spread each fire by up to this much, e.g. 30s.")
]
ProfileOpt = Annotated[str | None, typer.Option("--profile", help="smoke, fast or strict.")]
NotifyOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--notify",
        metavar="SINK",
        help="A notify route (repeatable): this sink hears the schedule's verdict changes "
        "whatever its own check and target filters say.",
    ),
]
NewProfileOpt = Annotated[str | None, typer.Option("--profile", help=UNATTENDED_PROFILE_HELP)]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="litellm model for this schedule's runs; overrides the workers' ASSAY_MODEL.",
    ),
]
DayTokensOpt = Annotated[
    str | None,
    typer.Option(
        "--max-tokens-per-day",
        help="Spend ceiling: tokens per UTC day over all of this schedule's runs; once "
        "reached, its fires are skipped until the next UTC day (default: the fleet's, "
        "ASSAY_SPEND_SCHEDULE_TOKENS_PER_DAY).",
    ),
]
DayCostOpt = Annotated[
    str | None,
    typer.Option(
        "--max-cost-per-day",
        help="Spend ceiling: US dollars per UTC day over all of this schedule's runs "
        "(models with a known price).",
    ),
]


def _fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    print_line(f"{ERROR_PREFIX}{message}", sys.stderr)
    raise typer.Exit(code)


def _settings() -> AssaySettings:
    from schemas.settings import load_settings, settings_problem, unknown_settings

    try:
        settings = load_settings()
    except ValueError as exc:
        _fail(
            f"the configuration is invalid ({settings_problem(exc)}); "
            "fix ASSAY_* or the ASSAY_CONFIG file"
        )
    for problem in unknown_settings():
        print_line(f"assay: warning: {problem}", sys.stderr)
    return settings


def _redis(settings: AssaySettings) -> Any:
    url = _redis_url(settings)
    require_reachable(url)  # a quick answer (69) before the patient client's retries
    client = connect(url)
    try:
        client.ping()
    except Exception as exc:
        _fail(
            f"cannot reach Redis at {shown_url(url)} ({exc}); start it or fix ASSAY_REDIS_URL",
            EXIT_UNAVAILABLE,
        )
    return client


def _store(settings: AssaySettings) -> ScheduleStore:
    from scheduler.schedules import ScheduleStore

    return ScheduleStore(_redis(settings), settings.key_prefix, settings.min_interval_seconds)


def _verdicts(store: ScheduleStore, settings: AssaySettings) -> VerdictStore:
    from workers.fleet.store import VerdictStore

    return VerdictStore.from_settings(settings, store.redis)


def _seconds(option: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return parse_duration(text)
    except WhenError as exc:
        _fail(f"{option}: {exc}")


def _probe_mode(value: str) -> str:
    if value not in PROBE_MODES:
        _fail(f"--probe must be one of {', '.join(PROBE_MODES)}, not {value!r}")
    return value


def _misfire(value: str | None) -> str | None:
    if value is not None and value not in ("skip", "run_once"):
        _fail(f"--misfire must be skip or run_once, not {value!r}")
    return value


def _flag_fields(
    *,
    cron: str | None,
    tz: str | None,
    every: str | None,
    profile: str | None,
    model: str | None,
    misfire: str | None,
    jitter: str | None,
    probe: str | None,
    notify: list[str] | None,
    tokens_per_day: str | None,
    cost_per_day: str | None,
) -> dict[str, Any]:
    """The Schedule fields the flags `add` and `update` share set, by the schedule's own
    names, only those given (what is left out keeps the schedule's default or its value)."""
    given: dict[str, Any] = {
        "cron": cron,
        "timezone": tz,
        "interval_seconds": _seconds("--every", every),
        "misfire": _misfire(misfire),
        "jitter_seconds": _seconds("--jitter", jitter),
        "profile": profile,
        "model": model,
        "probe": _probe_mode(probe) if probe is not None else None,
        "notify": notify,
        "spend": _day_ceiling(tokens_per_day, cost_per_day),
    }
    return {name: value for name, value in given.items() if value is not None}


def _validation_message(exc: Exception) -> str:
    """The first validation error as one sentence, naming the field when there is one."""
    from pydantic import ValidationError

    if not isinstance(exc, ValidationError):
        return str(exc)
    error = exc.errors()[0]
    message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    where = ".".join(str(part) for part in error.get("loc", ()))
    return f"{where}: {message}" if where else message


@schedule_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="A unique name for the schedule.")],
    predicate: Annotated[str, typer.Argument(help="The predicate (or question) to evaluate.")],
    cron: CronOpt = None,
    tz: TzOpt = None,
    every: EveryOpt = None,
    context: Annotated[
        list[str] | None, typer.Option("--context", help="A kubeconfig context (repeatable).")
    ] = None,
    contexts: Annotated[
        str | None,
        typer.Option("--contexts", help="Context glob, resolved at each fire, e.g. 'prod-*'."),
    ] = None,
    snapshots: Annotated[
        list[str] | None,
        typer.Option(
            "--snapshots",
            help="Snapshot folder or glob (repeatable), e.g. 'snaps/*', under the snapshot "
            "roots (env ASSAY_SNAPSHOT_ROOTS, default: the current directory).",
        ),
    ] = None,
    kubeconfig: Annotated[
        str | None, typer.Option("--kubeconfig", help="kubeconfig for contexts.")
    ] = None,
    query: Annotated[
        bool, typer.Option("--query", help="Ask a question (query) instead of checking.")
    ] = False,
    profile: NewProfileOpt = None,
    model: ModelOpt = None,
    max_iterations: FleetMaxIterationsOpt = None,
    max_tokens: FleetMaxTokensOpt = None,
    timeout: FleetTimeoutOpt = None,
    misfire: MisfireOpt = None,
    jitter: JitterOpt = None,
    probe: ProbeOpt = None,
    notify: NotifyOpt = None,
    max_tokens_per_day: DayTokensOpt = None,
    max_cost_per_day: DayCostOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Add a schedule: PREDICATE on the targets, by --cron [--tz] or --every."""
    from pydantic import ValidationError

    from scheduler.schedules import ScheduleConflict
    from schemas.budget import Budget
    from schemas.schedule import Schedule, ScheduleTargets

    if (cron is None) == (every is None):
        _fail("give exactly one of --cron EXPR or --every DURATION")
    if tz is not None and cron is None:
        _fail("--tz applies to --cron only; intervals run in real time")
    kinds = sum([bool(context), contexts is not None, bool(snapshots)])
    if kinds != 1:
        _fail("give the targets with exactly one of --context, --contexts or --snapshots")
    settings = _settings()
    fields: dict[str, Any] = {
        "name": name,
        "predicate": predicate,
        "kind": "query" if query else "check",
        "profile": settings.unattended_profile(),
        **_flag_fields(
            cron=cron, tz=tz, every=every, profile=profile, model=model, misfire=misfire,
            jitter=jitter, probe=probe, notify=notify, tokens_per_day=max_tokens_per_day,
            cost_per_day=max_cost_per_day,
        ),
    }  # fmt: skip
    try:
        fields["targets"] = ScheduleTargets(
            contexts=context or [],
            context_glob=contexts,
            snapshots=[_confined(s, settings) for s in snapshots or []],
            kubeconfig=kubeconfig,
        )
        fields["budget"] = Budget(
            max_iterations=max_iterations, max_tokens=max_tokens, timeout_seconds=timeout
        )
        schedule = Schedule.model_validate(fields)
    except ValidationError as exc:
        _fail(_validation_message(exc))
    for pattern in schedule.targets.snapshots:
        _refuse_empty_glob(pattern, settings)
    store = _store(settings)
    text = schedule.predicate if schedule.kind == "check" else None
    require_model(store.redis, settings, model, text, waiting_note=False)
    require_routable_model(store.redis, settings, model)
    try:
        created = store.create(schedule)
    except ScheduleConflict as exc:
        _fail(str(exc))
    if json_out:
        _print_json(_as_dict(store, settings, created))
        return
    next_at = store.next_fire_at(created)
    print_line(
        f"added schedule {created.name} ({created.id}), {created.cadence()}; "
        f"next fire {_when(next_at, created.timezone)}"
    )


@schedule_app.command("update")
def update(
    ref: RefArg,
    predicate: Annotated[str | None, typer.Option("--predicate", help="New predicate.")] = None,
    cron: CronOpt = None,
    tz: TzOpt = None,
    every: EveryOpt = None,
    profile: ProfileOpt = None,
    model: ModelOpt = None,
    misfire: MisfireOpt = None,
    jitter: JitterOpt = None,
    probe: ProbeOpt = None,
    notify: NotifyOpt = None,
    max_tokens_per_day: DayTokensOpt = None,
    max_cost_per_day: DayCostOpt = None,
    default_spend_ceiling: Annotated[
        bool,
        typer.Option(
            "--default-spend-ceiling",
            help="Drop the schedule's own spend ceiling: the fleet's default applies again.",
        ),
    ] = False,
) -> None:
    """Change a schedule at runtime; running replicas pick it up on their next tick."""
    from scheduler.schedules import ScheduleConflict, ScheduleNotFound

    if cron is not None and every is not None:
        _fail("give --cron or --every, not both")
    changes = _flag_fields(
        cron=cron, tz=tz, every=every, profile=profile, model=model, misfire=misfire,
        jitter=jitter, probe=probe, notify=notify, tokens_per_day=max_tokens_per_day,
        cost_per_day=max_cost_per_day,
    )  # fmt: skip
    if predicate is not None:
        changes["predicate"] = predicate
    if cron is not None:  # one cadence: setting either clears the other
        changes["interval_seconds"] = None
    if every is not None:
        changes["cron"] = None
    if "spend" in changes and default_spend_ceiling:
        _fail("give --max-tokens-per-day / --max-cost-per-day or --default-spend-ceiling, not both")
    if default_spend_ceiling:
        changes["spend"] = None
    if not changes:
        _fail("nothing to change; give at least one option, e.g. --every 30m")
    settings = _settings()
    store = _store(settings)
    require_routable_model(store.redis, settings, changes.get("model"))
    try:
        changed = store.update(_full_ref(store, ref), **changes)
    except ScheduleNotFound as exc:
        _fail(str(exc), EXIT_UNKNOWN)
    except ScheduleConflict as exc:
        _fail(str(exc))
    print_line(
        f"updated schedule {changed.name}: {changed.cadence()}; next fire "
        f"{_when(store.next_fire_at(changed), changed.timezone)}"
    )


@schedule_app.command("list")
def list_schedules(json_out: JsonOpt = False, wide: WideOpt = False) -> None:
    """All schedules with their next fire and the last verdict per target."""
    settings = _settings()
    store = _store(settings)
    verdicts = _verdicts(store, settings)
    schedules = store.all()
    if json_out:
        _print_json([_as_dict(store, settings, s, verdicts) for s in schedules])
        return
    if not schedules:
        typer.echo(
            "no schedules yet; add one with `assay schedule add NAME PREDICATE --every 1h ...`"
        )
        return
    _print_schedules(store, schedules, verdicts, wide)


def _print_schedules(
    store: ScheduleStore, schedules: list[Schedule], verdicts: VerdictStore, wide: bool
) -> None:
    """One line per schedule, no box drawing when piped, like the fleet's other tables.

    By default it fits 80 columns: the next fire as how long until it, the last
    verdicts as a tally (`assay schedule show` has them per target); ``wide`` adds the
    id and the targets and shows both in full. Cells are text, never rich markup (a
    glob like ``snaps/[a-c]*`` is shown as written).
    """
    from collections import Counter

    from assay.render import Col, add_line, line_table, safe_markup

    console = stdout_console(wide)
    table = line_table(
        console,
        Col("name", "gives"),
        *([Col("id")] if wide else []),
        Col("cadence", "gives"),
        *([Col("targets")] if wide else []),
        Col("state"),
        Col("next fire"),
        Col("last verdicts", "main", least=14),  # name and cadence give way first
        wide=wide,
    )
    for schedule in schedules:
        last = _last_verdicts(schedule, verdicts)
        upcoming = store.next_fire_at(schedule) if schedule.enabled else None
        if wide:
            when = _when(upcoming, schedule.timezone)
            outcome = ", ".join(f"{target}: {verdict}" for target, verdict in last.items())
        else:
            when = _until(upcoming)
            tally = Counter(last.values())
            outcome = " · ".join(f"{verdict} {count}" for verdict, count in tally.items())
        cells = [
            schedule.name,
            *([schedule.id] if wide else []),
            schedule.cadence(),
            *([schedule.targets.describe()] if wide else []),
            "paused" if schedule.paused else "active",
            when,
            outcome or "-",
        ]
        add_line(table, *(safe_markup(cell) for cell in cells))
    console.print(table, soft_wrap=False)


@schedule_app.command("show")
def show(ref: RefArg, json_out: JsonOpt = False) -> None:
    """One schedule in full."""
    settings = _settings()
    store = _store(settings)
    schedule = _get(store, ref)
    data = _as_dict(store, settings, schedule, _verdicts(store, settings))
    if json_out:
        _print_json(data)
        return
    lines = [
        f"name:        {schedule.name}",
        f"id:          {schedule.id}",
        f"{schedule.kind + ':':<13}{schedule.predicate}",
        f"targets:     {schedule.targets.describe()}",
        f"cadence:     {schedule.cadence()}",
        f"state:       {'paused' if schedule.paused else 'active'}",
        f"misfire:     {schedule.misfire}",
        f"jitter:      {schedule.jitter_seconds:g}s",
        f"profile:     {schedule.profile}",
        f"probe:       {schedule.probe}",
        f"model:       {schedule.model or '(settings)'}",
        f"notify:      {', '.join(schedule.notify) or '-'}",
        f"next fire:   {_when(store.next_fire_at(schedule), schedule.timezone)}",
        *_spend_lines(schedule, data["spend_today"]),
    ]
    if schedule.last_fire is not None:
        lines.append(
            f"last fire:   {_when(schedule.last_fire.scheduled_at, schedule.timezone)}"
            + (
                f" (covering {schedule.last_fire.missed} missed)"
                if schedule.last_fire.missed
                else ""
            )
        )
        for target, verdict in data["last_verdicts"].items():
            run = schedule.last_fire.runs.get(target, "")
            lines.append(f"  {target}: {verdict}  (run {run})")
    for line in lines:
        print_line(line)


@schedule_app.command("pause")
def pause(ref: RefArg) -> None:
    """Stop firing until resumed."""
    schedule = _change(ref, "pause")
    print_line(f"paused schedule {schedule.name}")


@schedule_app.command("resume")
def resume(ref: RefArg) -> None:
    """Fire again from the next instant; paused instants are not made up."""
    schedule = _change(ref, "resume")
    print_line(f"resumed schedule {schedule.name}")


@schedule_app.command("remove")
def remove(ref: RefArg) -> None:
    """Delete a schedule and its timer (verdicts already recorded stay)."""
    schedule = _change(ref, "remove")
    print_line(f"removed schedule {schedule.name}")


@schedule_app.command("run-now")
def run_now(ref: RefArg) -> None:
    """Fire once now (even while paused); a scheduler replica enqueues it."""
    from scheduler.schedules import ScheduleNotFound

    settings = _settings()
    store = _store(settings)
    ref = _full_ref(store, ref)
    try:
        entry = store.run_now(ref)
    except ScheduleNotFound as exc:
        _fail(str(exc), EXIT_UNKNOWN)
    schedule = store.get(ref)
    print_line(
        f"queued a fire of {schedule.name} at {iso_utc(entry.due_at)}; "
        "a running scheduler (`assay scheduler` or `assay up`) enqueues it"
    )


def scheduler_command(
    tick: Annotated[
        float | None, typer.Option("--tick", min=0.01, help="Seconds between rounds.")
    ] = None,
) -> None:
    """Run a scheduler replica (several may run at once); SIGTERM stops it cleanly."""
    import threading

    from scheduler.service import ReplicaStats, run_replica, stop_on_signals
    from workers.engine.logs import configure_logging
    from workers.fleet.redis_client import RedisUnreachable

    settings = _settings()
    settings = settings.model_copy(
        update={
            "redis_url": _redis_url(settings),
            "scheduler_tick_seconds": tick or settings.scheduler_tick_seconds,
        }
    )
    configure_logging(settings)
    stop = threading.Event()
    stats = ReplicaStats()
    stop_on_signals(stop, stats)
    try:
        run_replica(settings, stop, fail_fast=True, stats=stats)
    except (ValueError, RedisUnreachable) as exc:  # nothing to schedule from: 69 at once
        _fail(str(exc), EXIT_UNAVAILABLE)
    except KeyboardInterrupt:
        if stats.failing is None:
            raise typer.Exit(EXIT_INTERRUPTED) from None
    if stats.failing is not None:  # it stopped while it could not work: say so, not 0
        _fail(
            f"the scheduler stopped while the fleet's Redis at "
            f"{shown_url(settings.redis_url or '')} did not answer ({stats.failing}); "
            "start it or fix ASSAY_REDIS_URL",
            EXIT_UNAVAILABLE,
        )


def register(app: typer.Typer) -> None:
    app.add_typer(schedule_app, name="schedule")
    app.command("scheduler")(scheduler_command)


# --- helpers ---------------------------------------------------------------------------------
def _redis_url(settings: AssaySettings) -> str:
    from assay.local_mode import require_redis_url
    from workers.fleet.redis_client import FleetNotConfigured

    try:
        return require_redis_url(settings)
    except FleetNotConfigured as exc:
        _fail(str(exc), EXIT_UNAVAILABLE)


def _full_ref(store: ScheduleStore, ref: str) -> str:
    """``ref`` as given when it names a schedule (an id or a name), else the one schedule id
    it begins (with or without the ellipsis a copied cut id brings), as `verdict` and `batch`
    take ids (assay/id_prefixes.py); several: exit 64 naming them; none: ``ref`` unchanged,
    which the store then says it cannot find (66)."""
    from assay.id_prefixes import SHOWN, AmbiguousId, only_match, pasted
    from scheduler.schedules import ScheduleNotFound

    try:
        store.resolve(ref)
        return ref
    except ScheduleNotFound:
        pass
    prefix = pasted(ref)
    if not re.fullmatch(r"sch-[0-9a-f]{0,12}", prefix):
        return ref
    try:
        return only_match(prefix, store.ids_starting_with(prefix, limit=SHOWN + 1)) or ref
    except AmbiguousId as exc:
        _fail(str(exc))


def _get(store: ScheduleStore, ref: str) -> Schedule:
    from scheduler.schedules import ScheduleNotFound

    try:
        return store.get(_full_ref(store, ref))
    except ScheduleNotFound as exc:
        _fail(str(exc), EXIT_UNKNOWN)


def _change(ref: str, action: str) -> Schedule:
    from scheduler.schedules import ScheduleNotFound

    settings = _settings()
    store = _store(settings)
    try:
        result: Schedule = getattr(store, action)(_full_ref(store, ref))
    except ScheduleNotFound as exc:
        _fail(str(exc), EXIT_UNKNOWN)
    return result


def _last_verdicts(schedule: Schedule, verdicts: VerdictStore | None) -> dict[str, str]:
    """Target -> latest verdict of the check the last fire evaluated there."""
    if schedule.last_fire is None or verdicts is None:
        return {}
    out: dict[str, str] = {}
    for target, check_id in schedule.last_fire.checks.items():
        verdict = verdicts.latest_verdict(check_id)
        out[target] = verdict.verdict.value if verdict is not None else "pending"
    return out


def _as_dict(
    store: ScheduleStore,
    settings: AssaySettings,
    schedule: Schedule,
    verdicts: VerdictStore | None = None,
) -> dict[str, Any]:
    """The API's ScheduleView (same fields, same timestamps), plus the last fire's verdicts."""
    from assay.api_models import ScheduleView
    from assay.spend_view import schedule_today

    stored = schedule.model_dump(exclude={"next_fire_at", "spend_today"})
    view = ScheduleView(
        **stored,
        next_fire_at=store.next_fire_at(schedule),
        spend_today=schedule_today(schedule, store.spend, settings),
    )
    data: dict[str, Any] = view.model_dump(mode="json")
    data["last_verdicts"] = _last_verdicts(schedule, verdicts)
    return data


def _day_ceiling(tokens: str | None, cost: str | None) -> Any:
    """The --max-*-per-day flags as a spend ceiling (None when neither is given)."""
    return spend_ceiling(
        tokens, cost, tokens_flag="--max-tokens-per-day", cost_flag="--max-cost-per-day"
    )


def _spend_lines(schedule: Schedule, today: dict[str, Any]) -> list[str]:
    """`schedule show`: the spend ceiling in force and what this UTC day spent of it."""
    from assay.fleet_render import spend_summary
    from schemas.spend import ScopeSpend

    spend = ScopeSpend.model_validate(today)
    if schedule.spend is not None:
        ceiling = schedule.spend.describe("per UTC day")
    elif spend.ceilings:
        ceiling = "the fleet's default (ASSAY_SPEND_SCHEDULE_*)"
    else:
        ceiling = "none"
    return [f"spend ceiling: {ceiling}", f"spent today: {spend.period}: {spend_summary(spend)}"]


def _when(moment: datetime | None, zone: str) -> str:
    from zoneinfo import ZoneInfo

    if moment is None:
        return "-"
    seconds = (moment - datetime.now(UTC)).total_seconds()
    local = moment.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M:%S %Z")
    if seconds >= 0:
        return f"{local} (in {_span(seconds)})"
    return f"{local} ({_span(-seconds)} ago)"


def _until(moment: datetime | None) -> str:
    """``in 15.0m`` / ``2.0h ago``: the next fire in a narrow table."""
    if moment is None:
        return "-"
    seconds = (moment - datetime.now(UTC)).total_seconds()
    return f"in {_span(seconds)}" if seconds >= 0 else f"{_span(-seconds)} ago"


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit}"
    return f"{seconds:.0f}s"


def _confined(pattern: str, settings: AssaySettings) -> str:
    """A snapshot folder or glob, absolute (replicas and workers may run elsewhere) and
    inside the snapshot roots (ASSAY_SNAPSHOT_ROOTS, default: the current directory)."""
    from workers.engine.snapshot_roots import SnapshotOutsideRoots, SnapshotRoots

    try:
        return SnapshotRoots.for_local(settings).confine_pattern(pattern)
    except SnapshotOutsideRoots as exc:
        _fail(str(exc))


def _refuse_empty_glob(pattern: str, settings: AssaySettings) -> None:
    """A snapshot glob that matches no folder today is a typo, not a schedule (64)."""
    from workers.engine.snapshot_roots import SnapshotRoots
    from workers.fleet.targets import snapshot_targets

    if next(iter(snapshot_targets(pattern, SnapshotRoots.for_local(settings))), None) is None:
        _fail(f"--snapshots {pattern!r} matches no snapshot folder; check the glob and try again")


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
