"""The fleet from the command line: `assay submit`, `verdict`, `run`, `checks`, `worker`.

Batches live in ``fleet_batch.py`` and local mode (`assay up`, `assay demo`) in
``fleet_local.py``; :func:`register` adds all of them.

Exit codes: a verdict's own code (0 true, 1 false, 2 poorly posed, 3 cannot
determine) wherever a verdict is shown; 75 when the run exists but has no
verdict yet; 66 when no run or check has that id; 69 when the fleet's Redis
cannot be reached; 64 for a wrong command line. `assay submit` without
``--wait`` exits 0 once the run is queued (it prints the run id, not a verdict).
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from assay.commands.fleet_common import (
    EXIT_UNAVAILABLE,
    CheckIdOpt,
    KubeconfigOpt,
    fail,
    fleet_client,
    stdout_console,
)
from assay.commands.options import (
    ApiBaseOpt,
    ContextOpt,
    EngineFlags,
    JsonOpt,
    MaxCostOpt,
    MaxIterationsOpt,
    MaxTokensOpt,
    ModelOpt,
    ProbeOpt,
    ProfileOpt,
    SnapshotOpt,
    TimeoutOpt,
    check_probe_mode,
    check_profile,
    confined_snapshot,
    id_checker,
    require_one_target,
    settings_or_usage,
    validation_detail,
)
from schemas.verdict import EXIT_PENDING, EXIT_UNKNOWN

# --- submit ------------------------------------------------------------------------------------


def submit(
    predicate: Annotated[str, typer.Argument(help="The predicate, in plain language.")],
    snapshot: SnapshotOpt = None,
    context: ContextOpt = None,
    kubeconfig: KubeconfigOpt = None,
    check_id: CheckIdOpt = None,
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
            "--wait-timeout", min=0.1, help="With --wait: give up after this many s (75)."
        ),
    ] = None,
    json_output: JsonOpt = False,
    model: ModelOpt = None,
    api_base: ApiBaseOpt = None,
    max_iterations: MaxIterationsOpt = None,
    max_tokens: MaxTokensOpt = None,
    timeout: TimeoutOpt = None,
    max_cost: MaxCostOpt = None,
    profile: ProfileOpt = None,
    probe: ProbeOpt = None,
) -> None:
    """Queue PREDICATE on the fleet and print its run id (--wait: the verdict, and exit with it)."""
    from pydantic import ValidationError

    from assay.client import WaitTimeout, make_target
    from scheduler.when import WhenError, deferral_for, resolve_not_before
    from schemas.request import EvaluationRequest

    require_one_target(snapshot, context)
    flags = EngineFlags(model, api_base, max_iterations, max_tokens, timeout, max_cost, profile)
    check_profile(flags.profile)
    check_probe_mode(probe)
    settings = settings_or_usage()
    try:
        not_before = resolve_not_before(at, in_) or deferral_for(predicate)
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
        "not_before": not_before,
        "probe": probe,
    }
    try:
        request = EvaluationRequest.model_validate({k: v for k, v in fields.items() if v})
    except ValidationError as exc:
        detail = validation_detail(exc)
        raise typer.BadParameter(f"the predicate cannot be submitted: {detail}") from None

    with fleet_client(settings) as client:
        receipt = client.submit_request(request)
        if not wait:
            if json_output:
                body = receipt.model_dump(mode="json")
                body["not_before"] = not_before.isoformat() if not_before else None
                print(json.dumps(body))
            else:
                print(receipt.run_id)
                if not_before is not None:
                    print(f"deferred until {not_before.isoformat()}", file=sys.stderr)
            return
        print(f"run {receipt.run_id} queued; waiting for its verdict", file=sys.stderr)
        try:
            verdict = client.wait(receipt.run_id, timeout=wait_timeout)
        except WaitTimeout as exc:
            fail(f"{exc}; read it later with `assay verdict {receipt.run_id}`", EXIT_PENDING)
    _show_verdict(verdict, json_output)
    raise typer.Exit(verdict.exit_code)


def _show_verdict(verdict: Any, json_output: bool) -> None:
    from assay.render import render_verdict

    if json_output:
        print(verdict.model_dump_json(indent=2))
    else:
        render_verdict(verdict, stdout_console())


# --- verdict / run ------------------------------------------------------------------------------


def verdict(
    id_: Annotated[
        str,
        typer.Argument(
            metavar="ID", help="A run id or a check id.", callback=id_checker("run or check id")
        ),
    ],
    history: Annotated[
        int | None, typer.Option("--history", min=1, help="Show the check's last N verdicts.")
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Show the verdict of run or check ID; exit with its code (75 pending, 66 unknown)."""
    with fleet_client() as client:
        state = client.run_state(id_)
        if state is not None:
            check_id, latest = state.check_id, client.store.run_verdict(id_)
        else:
            check_id, latest = id_, client.store.latest_verdict(id_)
            if latest is None:
                fail(
                    f"no run or check has id {id_!r}; list checks with `assay checks`", EXIT_UNKNOWN
                )
        past = client.history(check_id, history) if history else None
    if past is not None:
        from assay.fleet_render import render_history

        if json_output:
            print(json.dumps([v.model_dump(mode="json") for v in past], indent=2))
        else:
            render_history(past, stdout_console())
    elif latest is not None:
        _show_verdict(latest, json_output)
    elif json_output and state is not None:
        print(state.model_dump_json(indent=2))
    if latest is None:
        assert state is not None
        fail(f"run {id_} is {state.status} and has no verdict yet; ask again later", EXIT_PENDING)
    raise typer.Exit(latest.exit_code)


def run(
    run_id: Annotated[
        str,
        typer.Argument(help="The run id `assay submit` printed.", callback=id_checker("run id")),
    ],
    json_output: JsonOpt = False,
) -> None:
    """Show run RUN_ID step by step; exit with its verdict's code (75 pending, 66 unknown)."""
    from assay.render import render_report

    with fleet_client() as client:
        state = client.run_state(run_id)
        report = client.run_report(run_id)
    if state is None and report is None:
        fail(f"no run has id {run_id!r}; check the id `assay submit` printed", EXIT_UNKNOWN)
    if report is None:
        assert state is not None
        if json_output:
            print(state.model_dump_json(indent=2))
        else:
            print(f"run {run_id} · check {state.check_id} · status {state.status}")
        fail(f"run {run_id} has no report yet ({state.status}); ask again later", EXIT_PENDING)
    if json_output:
        print(report.model_dump_json(indent=2))
    else:
        render_report(report, stdout_console())
    if report.verdict is None:
        raise typer.Exit(EXIT_PENDING)
    raise typer.Exit(report.verdict.exit_code)


# --- checks ---------------------------------------------------------------------------------------


def checks(
    verdict_filter: Annotated[
        str | None,
        typer.Option(
            "--verdict", help="Only checks whose latest verdict is this (true, false, ...)."
        ),
    ] = None,
    target: Annotated[
        str | None, typer.Option("--target", help="Only checks on this target.")
    ] = None,
    changed_since: Annotated[
        str | None,
        typer.Option("--changed-since", help="Only checks whose verdict changed within, e.g. 1h."),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many rows.")] = 1000,
    json_output: JsonOpt = False,
) -> None:
    """List checks with their latest verdict, target and age."""
    from scheduler.when import WhenError, parse_duration
    from schemas.verdict import VerdictKind

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
    if json_output:
        print(json.dumps([row.model_dump(mode="json") for row in rows], indent=2))
        return
    from assay.fleet_render import render_checks

    render_checks(rows, stdout_console())


# --- worker ---------------------------------------------------------------------------------------


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
) -> None:
    """Start a Celery worker that evaluates queued runs (foreground; Ctrl-C stops it warmly)."""
    from assay.local_mode import require_redis_url
    from workers.celery_app import FleetNotConfigured, create_app

    settings = settings_or_usage(
        worker_concurrency=concurrency, worker_pool=pool, worker_processes=processes
    )
    try:
        url = require_redis_url(settings)
    except FleetNotConfigured as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    settings = settings.model_copy(update={"redis_url": url})
    if settings.worker_processes > 1:
        from assay.local_mode import child_env
        from assay.worker_group import child_commands, run_worker_group

        commands = child_commands(
            settings.worker_processes,
            concurrency=settings.worker_concurrency,
            pool=settings.worker_pool,
            loglevel=loglevel,
            hostname=hostname,
        )
        raise typer.Exit(run_worker_group(commands, child_env(url)))
    app = create_app(settings)
    argv = [
        "worker",
        f"--pool={settings.worker_pool}",
        f"--concurrency={settings.worker_concurrency}",
        f"--loglevel={loglevel}",
    ]
    app.worker_main(argv + ([f"--hostname={hostname}"] if hostname else []))


def register(app: typer.Typer) -> None:
    from assay.commands import fleet_batch, fleet_local

    app.command("submit")(submit)
    app.command("verdict")(verdict)
    app.command("run")(run)
    app.command("checks")(checks)
    app.command("worker")(worker)
    fleet_batch.register(app)
    fleet_local.register(app)
