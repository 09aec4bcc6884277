"""The fleet from the command line: `assay submit`, `verdict`, `run`, `checks`, `worker`.

Batches live in ``fleet_batch.py`` and local mode (`assay up`, `assay demo`) in
``fleet_local.py``; :func:`register` adds all of them.

Exit codes: a verdict's own code (0 true, 1 false, 2 poorly posed, 3 cannot
determine) wherever a verdict is shown; 75 when the run exists but has no
verdict yet; 66 when no run or check has that id; 67 when the run is known but its
report is no longer kept (docs/fleet.md, Retention and sizing); 69 when the fleet's Redis
cannot be reached; 64 for a wrong command line. `assay submit` without
``--wait`` exits 0 once the run is queued (it prints the run id, not a verdict).
"""

from __future__ import annotations

# Commands import the store, fleet, engine or API inside the function that needs them:
# `assay --help` loads in about 0.3 s and each of those adds 0.3-1 s more (measured with
# `python -X importtime -c 'import assay.cli'`; tests/assay/test_cli_check.py keeps the engine out).
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from assay.commands import fleet_batch, fleet_local
from assay.commands.fleet_common import (
    EXIT_INTERRUPTED,
    EXIT_UNAVAILABLE,
    CheckIdOpt,
    KubeconfigOpt,
    WideOpt,
    dump_json,
    expand_id,
    fail,
    fleet_client,
    iso_utc,
    note,
    require_runnable,
    stdout_console,
    still_pending,
)
from assay.commands.options import (
    ContextOpt,
    EngineFlags,
    FleetApiBaseOpt,
    FleetMaxCostOpt,
    FleetMaxIterationsOpt,
    FleetMaxTokensOpt,
    FleetModelOpt,
    FleetTimeoutOpt,
    JsonOpt,
    ProbeOpt,
    ProfileOpt,
    SnapshotOpt,
    check_probe_mode,
    check_profile,
    check_text,
    confined_snapshot,
    id_checker,
    require_one_target,
    settings_or_usage,
    validation_detail,
)
from assay.worker_group import child_commands, run_worker_group
from scheduler.when import WhenError, parse_duration, resolve_not_before
from schemas.exit_codes import EXIT_EXPIRED, EXIT_PENDING, EXIT_UNKNOWN, VerdictKind

if TYPE_CHECKING:
    from schemas.fleet import RunProgress
    from schemas.request import EvaluationRequest

# --- submit ------------------------------------------------------------------------------------


def submit(
    predicate: Annotated[str, typer.Argument(help="The predicate, in plain language.")],
    snapshot: SnapshotOpt = None,
    context: ContextOpt = None,
    kubeconfig: KubeconfigOpt = None,
    check_id: CheckIdOpt = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id",
            help="Use this run id (default: a new one); submitting a known run id again "
            "queues nothing and prints that run's receipt.",
            callback=id_checker("run id"),
        ),
    ] = None,
    query: Annotated[bool, typer.Option("--query", help="Ask a question, not a check.")] = False,
    at: Annotated[
        str | None, typer.Option("--at", help="Run at this instant, e.g. 2027-01-01T00:00:00Z.")
    ] = None,
    in_: Annotated[str | None, typer.Option("--in", help="Run after this long, e.g. 2h.")] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for the verdict; exit with it.")
    ] = False,
    wait_timeout: Annotated[
        float | None,
        typer.Option(
            "--wait-timeout",
            min=0.1,
            help="With --wait: give up after this many seconds and exit 75 (default: no "
            "limit, so set one in CI: a run no worker takes waits forever).",
        ),
    ] = None,
    json_output: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the receipt {run_id, check_id, ...} as JSON; with --wait, the verdict.",
        ),
    ] = False,
    model: FleetModelOpt = None,
    api_base: FleetApiBaseOpt = None,
    max_iterations: FleetMaxIterationsOpt = None,
    max_tokens: FleetMaxTokensOpt = None,
    timeout: FleetTimeoutOpt = None,
    max_cost: FleetMaxCostOpt = None,
    profile: ProfileOpt = None,
    probe: ProbeOpt = None,
    wide: WideOpt = False,
) -> None:
    """Queue PREDICATE on the fleet and print its run id (--wait: the verdict, and exit with it)."""
    from pydantic import ValidationError

    from scheduler.when import WhenError
    from schemas.request import EvaluationRequest, make_target

    require_one_target(snapshot, context)
    check_text(predicate)
    flags = EngineFlags(model, api_base, max_iterations, max_tokens, timeout, max_cost, profile)
    check_profile(flags.profile)
    check_probe_mode(probe)
    settings = settings_or_usage()
    try:
        not_before = resolve_not_before(at, in_)
    except WhenError as exc:
        raise typer.BadParameter(str(exc)) from None
    if snapshot is not None:
        snapshot = confined_snapshot(snapshot, settings)
    target = make_target(
        snapshot=str(snapshot) if snapshot else None,
        context=context,
        kubeconfig=kubeconfig or settings.kubeconfig,
    )
    fields: dict[str, Any] = {
        "kind": "query" if query else "check",
        "text": predicate,
        "target": target,
        "profile": flags.profile or settings.profile,
        "budget": flags.budget(),
        "model": flags.model,
        "api_base": flags.api_base,
        "check_id": check_id,
        "run_id": run_id,
        "not_before": not_before,
        "probe": probe,
    }
    try:
        request = EvaluationRequest.model_validate({k: v for k, v in fields.items() if v})
    except ValidationError as exc:
        detail = validation_detail(exc)
        raise typer.BadParameter(f"the predicate cannot be submitted: {detail}") from None

    text = request.text if request.kind == "check" else None
    require_runnable(settings, request.model, request.api_base, text)
    from assay.client import WaitTimeout  # Celery and kombu: after the quick refusals

    with fleet_client(settings) as client:
        known = client.run_state(request.run_id) if run_id else None  # a chosen id may be taken
        receipt = client.submit_request(request)
        if known is not None:
            _note_known_run(request, known)
        if not wait:
            if json_output:
                print(dump_json(receipt))
            else:
                print(receipt.run_id)
                if receipt.not_before is not None:
                    note(f"deferred until {iso_utc(receipt.not_before)}")
            return
        if known is None:
            print(f"run {receipt.run_id} queued; waiting for its verdict", file=sys.stderr)
        try:
            verdict = client.wait(receipt.run_id, timeout=wait_timeout)
        except WaitTimeout as exc:
            still_pending(f"{exc}; read it later with `assay verdict {receipt.run_id}`")
        except KeyboardInterrupt:  # the run goes on: say where its verdict will be
            fail(
                f"stopped waiting; run {receipt.run_id} goes on in the fleet: read its "
                f"verdict with `assay verdict {receipt.run_id}`",
                EXIT_INTERRUPTED,
            )
    _show_verdict(verdict, json_output, wide)
    raise typer.Exit(verdict.exit_code)


def _note_known_run(request: EvaluationRequest, known: RunProgress) -> None:
    """Say that a chosen run id was taken, so nothing was queued, and by what.

    Resubmitting a known run id answers that run (safe after a lost answer, and
    documented); with another predicate or target, what is printed next, and with
    --wait the exit code, are that other evaluation's, so that is said plainly.
    """
    if known.check_id == request.check_id and known.target == request.target.name:
        note(f"run {known.run_id} was already submitted; nothing was queued again")
        return
    note(
        f"warning: run id {known.run_id} already belongs to check {known.check_id} on "
        f"{known.target}, not to this one: nothing was queued, and what follows is that "
        "run's; pick a new --run-id for a new evaluation"
    )


def _show_verdict(verdict: Any, json_output: bool, wide: bool = False) -> None:
    from assay.render import render_verdict

    if json_output:
        print(dump_json(verdict))
    else:
        render_verdict(verdict, stdout_console(wide), wide=wide)


# --- verdict / run ------------------------------------------------------------------------------


def verdict(
    id_: Annotated[
        str,
        typer.Argument(
            metavar="ID",
            help="A run id or a check id, or any unique prefix of one.",
            callback=id_checker("run or check id", lookup=True),
        ),
    ],
    history: Annotated[
        int | None, typer.Option("--history", min=1, help="Show the check's last N verdicts.")
    ] = None,
    json_output: JsonOpt = False,
    wide: WideOpt = False,
) -> None:
    """Show the verdict of run or check ID; exit with its code (75 pending, 66 unknown,
    67 its report has expired).

    ID may be any unique prefix of a run or check id (a table's cut id, ellipsis or not)."""
    from workers.fleet.store import ReportExpired

    with fleet_client() as client:
        try:
            found = _run_or_check(client, id_)
            if found is None and (expanded := expand_id(client.store, id_, ("run", "check"))):
                found = _run_or_check(client, expanded[1])
        except ReportExpired as exc:  # far back in a busy check's history: say so, exit 67
            note(str(exc))
            raise typer.Exit(EXIT_EXPIRED) from None
        if found is None:
            fail(f"no run or check has id {id_!r}; list checks with `assay checks`", EXIT_UNKNOWN)
        state, check_id, latest = found
        due = client.due_at(state.run_id) if latest is None and state is not None else None
        past = client.history(check_id, history) if history else None
    if past is not None:
        from assay.fleet_render import render_history

        if json_output:
            print(dump_json(past))
        else:
            render_history(past, stdout_console(wide), wide=wide)
    elif latest is not None:
        _show_verdict(latest, json_output, wide)
    elif json_output and state is not None:
        print(dump_json(state))
    if latest is None:
        assert state is not None
        when = f", due at {iso_utc(due)}" if due is not None else ""
        still_pending(
            f"run {state.run_id} of check {state.check_id} is {state.status}{when} and has no "
            "verdict yet; ask again later"
        )
    raise typer.Exit(latest.exit_code)


def _run_or_check(client: Any, id_: str) -> tuple[Any, str, Any] | None:
    """(run state, check id, latest verdict) of run or check ``id_`` as given; None when
    neither is stored (nor a check with a run pending)."""
    state = client.run_state(id_)
    if state is not None:
        return state, state.check_id, client.store.run_verdict(id_)
    latest = client.store.latest_verdict(id_)
    if latest is None:
        state = client.pending_run_of_check(id_)
    if latest is None and state is None:
        return None
    return state, id_, latest


def run(
    run_id: Annotated[
        str,
        typer.Argument(
            help="The run id `assay submit` printed, or any unique prefix of it.",
            callback=id_checker("run id", lookup=True),
        ),
    ],
    json_output: Annotated[
        bool,
        typer.Option("--json", help="Print the run as GET /v1/runs/RUN_ID returns it."),
    ] = False,
    wide: WideOpt = False,
) -> None:
    """Show run RUN_ID step by step; exit with its verdict's code (75 pending, 66 unknown,
    67 its report has expired).

    --json prints what GET /v1/runs/RUN_ID returns (state, verdict, report).
    """
    from assay.render import render_report
    from workers.fleet.report_codec import UnreadableReport
    from workers.fleet.store import ReportExpired

    with fleet_client() as client:
        state = client.run_state(run_id)
        if state is None and (expanded := expand_id(client.store, run_id, ("run",))):
            run_id = expanded[1]
            state = client.run_state(run_id)
        try:
            report = client.run_report(run_id)
        except ReportExpired as exc:  # kept as long as it was meant to be: say so, exit 67
            note(str(exc))
            raise typer.Exit(EXIT_EXPIRED) from None
        except UnreadableReport as exc:  # the verdict is kept apart from the report: show it
            if state is None:
                fail(f"run {run_id}'s report cannot be read: {exc}", EXIT_UNKNOWN)
            note(f"run {run_id}'s full report cannot be read: {exc}; showing its verdict")
            verdict = client.store.run_verdict(run_id)
            if json_output:
                print(dump_json(_run_view(state, None, verdict, report_error=str(exc))))
            elif verdict is not None:
                _show_verdict(verdict, json_output=False, wide=wide)
            raise typer.Exit(verdict.exit_code if verdict is not None else EXIT_UNKNOWN) from exc
        due = client.due_at(run_id) if state is not None and report is None else None
    if state is None and report is None:
        fail(f"no run has id {run_id!r}; check the id `assay submit` printed", EXIT_UNKNOWN)
    if json_output:
        print(dump_json(_run_view(state, report)))
    elif report is not None:
        render_report(report, stdout_console(wide), wide=wide)
    else:
        assert state is not None
        print(f"run {run_id} · check {state.check_id} · status {state.status}")
        if state.wake_at or due:
            print(f"wake_at {iso_utc(state.wake_at or due)}")  # type: ignore[arg-type]
    if report is None:
        assert state is not None
        still_pending(f"run {run_id} has no report yet ({state.status}); ask again later")
    if report.verdict is None:
        raise typer.Exit(EXIT_PENDING)
    raise typer.Exit(report.verdict.exit_code)


def _run_view(state: Any, report: Any, verdict: Any = None, report_error: str | None = None) -> Any:
    """The API's RunView of a run (its report alone when the run's state has expired)."""
    from assay.api_models import RunView

    if state is None:
        return report
    return RunView.of(state, report, verdict, report_error=report_error)


# --- checks ---------------------------------------------------------------------------------------


def checks(
    verdict_filter: Annotated[
        str | None,
        typer.Option(
            "--verdict", help="Only checks whose latest verdict is this (true, false, ...)."
        ),
    ] = None,
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="Only checks on this target: a context name, or a snapshot as "
            "snapshot:FOLDER or just FOLDER (prod-eu finds snapshot:prod-eu).",
        ),
    ] = None,
    changed_since: Annotated[
        str | None,
        typer.Option("--changed-since", help="Only checks whose verdict changed within, e.g. 1h."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many rows.")] = 1000,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the checks as a JSON list, as the API does.")
    ] = False,
    wide: WideOpt = False,
) -> None:
    """List checks with their latest verdict, target and age."""

    if verdict_filter is not None and verdict_filter not in {v.value for v in VerdictKind}:
        choices = ", ".join(v.value for v in VerdictKind)
        raise typer.BadParameter(f"use one of {choices}", param_hint="--verdict")
    since = None
    if changed_since is not None:
        from datetime import timedelta

        try:
            since = timedelta(seconds=parse_duration(changed_since))
        except WhenError as exc:
            raise typer.BadParameter(str(exc), param_hint="--changed-since") from None
    with fleet_client() as client:
        rows = client.checks(
            verdict=verdict_filter, target=target, changed_since=since, limit=limit
        )
        fleet_spend = [] if json_output else client.fleet_spend_now()
    if json_output:
        print(dump_json(rows))
        return
    from assay.fleet_render import render_checks, spend_summary

    console = stdout_console(wide)
    render_checks(rows, console, wide=wide, changes=changed_since is not None)
    for period in fleet_spend:  # only with a fleet ceiling set (ASSAY_SPEND_FLEET_*)
        if period.ceilings:
            when = f"hour {period.period}" if "T" in period.period else f"day {period.period}"
            console.print(f"fleet spend, UTC {when}: {spend_summary(period)}", highlight=False)
    if not rows and target is not None:
        note(
            f"no check on target {target!r}: targets are named like a kubeconfig context "
            "(prod-eu) or snapshot:FOLDER (snapshot:prod-eu); `assay checks` lists them all"
        )


# --- worker ---------------------------------------------------------------------------------------


CELERY_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL", "FATAL")


def _check_worker_flags(pool: str, loglevel: str) -> None:
    """Refuse what would fail only once the worker runs: a pool assay cannot run on, and a
    log level Celery does not know (Celery's traceback and exit 1 otherwise).

    Why gevent and eventlet are refused, installed or not: their pools need every socket
    patched before anything imports (the ``celery`` command does it; ``worker_main``, which
    ``assay worker`` calls, does not), and unpatched a run's blocking call stops every other
    run of the process: a wave of 400 runs left two pending for good (issue 15).
    """
    if pool in ("gevent", "eventlet"):
        raise typer.BadParameter(
            f"the {pool} pool is not supported: it needs every socket patched before assay "
            "imports anything, which `assay worker` does not do, so one run's blocking call "
            "would stop every other; use threads (the default, many runs in one process), "
            "prefork or solo",
            param_hint="--pool / ASSAY_WORKER_POOL",
        )
    if loglevel.upper() not in CELERY_LOG_LEVELS:
        raise typer.BadParameter(
            f"{loglevel!r} is not a log level: use one of {', '.join(CELERY_LOG_LEVELS)}",
            param_hint="--loglevel",
        )


def worker(
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency", "-c", min=1, help="Runs at once [env ASSAY_WORKER_CONCURRENCY]."
        ),
    ] = None,
    pool: Annotated[
        str | None,
        typer.Option("--pool", help="threads (default), prefork, solo [env ASSAY_WORKER_POOL]."),
    ] = None,
    loglevel: Annotated[str, typer.Option("--loglevel", help="Celery's log level.")] = "INFO",
    processes: Annotated[
        int | None,
        typer.Option(
            "--processes",
            min=1,
            help="Worker processes, each running --concurrency runs; one per core uses every "
            "core [env ASSAY_WORKER_PROCESSES].",
        ),
    ] = None,
    hostname: Annotated[
        str | None, typer.Option("--hostname", "-n", help="Celery node name (NAME@HOST).")
    ] = None,
    cpu_affinity: Annotated[
        str | None,
        typer.Option(
            "--cpu-affinity",
            help="off (default), or hold each process (threads pool) to one CPU: adaptive (the "
            "least crowded, moving when others crowd it), auto or a list like 0-3 (only on CPUs "
            "the fleet has to itself); see docs/fleet.md [env ASSAY_WORKER_CPU_AFFINITY].",
        ),
    ] = None,
    process_index: Annotated[
        int, typer.Option("--process-index", min=0, hidden=True, help="Set by --processes.")
    ] = 0,
    scripted: Annotated[
        Path | None,
        typer.Option(
            "--scripted",
            help="Serve the bundled SCRIPTED model (not an LLM) replaying this script, and "
            "use it as this worker's model.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Start a Celery worker that evaluates queued runs (foreground; Ctrl-C stops it warmly).

    Its ASSAY_MODEL (or --scripted) is the model of every run that names none;
    without one it logs a warning at start-up and clients refuse such runs (64); one
    litellm cannot route is refused at start (64).
    """
    from assay.local_mode import require_redis_url
    from workers.fleet.celery_app import create_app
    from workers.fleet.redis_client import FleetNotConfigured

    settings = settings_or_usage(
        worker_concurrency=concurrency,
        worker_pool=pool,
        worker_processes=processes,
        worker_cpu_affinity=cpu_affinity,
    )
    _check_worker_flags(settings.worker_pool, loglevel)
    if scripted is None:
        _check_worker_model(settings)
    try:
        url = require_redis_url(settings)
    except FleetNotConfigured as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    settings = settings.model_copy(update={"redis_url": url})
    if scripted is not None:
        settings = _with_scripted_model(settings, scripted)
    announcer = _announce(settings)
    if settings.worker_processes > 1:
        from assay.local_mode import child_env

        commands = child_commands(
            settings.worker_processes,
            concurrency=settings.worker_concurrency,
            pool=settings.worker_pool,
            loglevel=loglevel,
            hostname=hostname,
            cpu_affinity=settings.worker_cpu_affinity,
        )
        extra = {k: v for k, v in (("model", settings.model), ("api_base", settings.api_base)) if v}
        try:
            raise typer.Exit(run_worker_group(commands, child_env(url, **extra)))
        finally:
            announcer.stop()
    _hold_to_cpu(settings, process_index)
    app = create_app(settings)
    argv = [
        "worker",
        f"--pool={settings.worker_pool}",
        f"--concurrency={settings.worker_concurrency}",
        f"--loglevel={loglevel}",
        # Mingle asks the other workers for their revoked task ids and waits a second for
        # answers at every start; assay revokes nothing (a run's state is in the store).
        "--without-mingle",
        # Gossip listens to the other workers' events (clock sync, leader election), which
        # assay uses for nothing; on a lost broker it only adds a traceback to the log.
        "--without-gossip",
    ]
    try:
        app.worker_main(argv + ([f"--hostname={hostname}"] if hostname else []))
    finally:
        announcer.stop()


def _hold_to_cpu(settings: Any, process_index: int) -> None:
    """``worker_cpu_affinity``, before Celery starts its threads; a CPU it may not use is 64."""
    from schemas.cpu_list import AffinityError
    from schemas.exit_codes import EXIT_USAGE
    from workers.fleet.cpu_affinity import hold_worker_process

    try:
        hold_worker_process(settings.worker_cpu_affinity, settings.worker_pool, process_index)
    except AffinityError as exc:
        fail(str(exc), EXIT_USAGE)


def _with_scripted_model(settings: Any, script: Any) -> Any:
    """Settings pointing at a SCRIPTED model replaying ``script``, served from this process."""
    from assay.testing.scripted_model import SCRIPTED_MODEL_NAME, ScriptedModel, ScriptError

    try:
        server = ScriptedModel(script, keep_requests=False).start()
    except ScriptError as exc:
        raise typer.BadParameter(str(exc), param_hint="--scripted") from None
    note(f"SCRIPTED MODEL - replaying {script} at {server.url}, not a real LLM")
    return settings.model_copy(
        update={"model": SCRIPTED_MODEL_NAME, "api_base": server.url, "api_key": None}
    )


def _check_worker_model(settings: Any) -> None:
    """Refuse (64) to start on an ``ASSAY_MODEL`` litellm cannot route at ``ASSAY_API_BASE``.

    Why: every run that names no model of its own would end ``cannot_determine`` with
    litellm's reason, for as long as the worker runs; the front doors cannot catch it,
    since they leave a run without a model to its worker. Most names are told without
    importing litellm (workers/engine/model_names.py); a worker that must ask imports it
    at start-up anyway.
    """
    from schemas.exit_codes import EXIT_USAGE
    from workers.engine.llm import unroutable_model
    from workers.engine.provider_keys import missing_key

    if settings.model and (problem := unroutable_model(settings.model, settings.api_base)):
        fail(f"this worker's ASSAY_MODEL cannot be used: {problem}", EXIT_USAGE)
    if settings.model and (problem := missing_key(settings.model, settings)):
        fail(f"this worker's ASSAY_MODEL cannot be used: {problem}", EXIT_USAGE)


def _announce(settings: Any) -> Any:
    """Tell clients which model this worker runs (assay.worker_presence); warn without one."""
    import structlog

    from assay.worker_presence import Announcer
    from workers.engine.logs import configure_logging
    from workers.engine.provider_keys import held_keys
    from workers.fleet.redis_client import RedisOutage, connect_for_loop

    configure_logging(settings)
    if not settings.model:
        structlog.get_logger("assay.worker").warning(
            "no_model_configured",
            detail="this worker has no model (ASSAY_MODEL is unset): runs without --model end "
            "cannot_determine and are kept out of history; `assay submit` refuses them",
        )
    from celery import signals

    redis = connect_for_loop(settings.redis_url)
    outage = RedisOutage(
        structlog.get_logger("assay.worker"), settings.redis_url, settings.redis_outage_log_seconds
    )
    announcer = Announcer(
        redis,
        settings.key_prefix,
        settings.model,
        settings.api_base,
        outage,
        keys=held_keys(settings),  # which providers it has a key for, never a key
    )
    signals.worker_ready.connect(announcer.mark_ready, weak=False)
    return announcer.start()


def register(app: typer.Typer) -> None:
    app.command("submit")(submit)
    app.command("verdict")(verdict)
    app.command("run")(run)
    app.command("checks")(checks)
    app.command("worker")(worker)
    fleet_batch.register(app)
    fleet_local.register(app)
