"""`assay batch`: one predicate over many targets, with a live tally.

    assay batch PREDICATE --snapshots 'DIR/*' | --contexts GLOB [--wait]
    assay batch status [BATCH_ID]             (no id: the newest batch)
    assay batch results [BATCH_ID] [--json | --jsonl]

With ``--wait`` it shows a progress bar, then the tally and the per-target
table (read from the store page by page) and exits like one check over the
whole fleet: 0 only when every target is true, else 1 if any is false, 2 if
any is poorly posed, 3 otherwise. Without ``--wait`` it prints the batch id.
A predicate that opens with a future instant ("on 2030-01-01, ...") is held
until then, as one `assay submit` is: the batch shows as waiting, with its due time.

``--json`` prints what the API answers for the same request (the same models
through the same serializer): ``results --json`` is one ``BatchResults``
document with every target, like ``GET /v1/batches/{id}/results`` with a page
large enough. ``results --jsonl`` streams one result per line instead, read page
by page, for a batch too big to hold at once.
"""

from __future__ import annotations

# Commands import the store, fleet, engine or API inside the function that needs them:
# `assay --help` loads in about 0.3 s and each of those adds 0.3-1 s more (measured with
# `python -X importtime -c 'import assay.cli'`; tests/assay/test_cli_check.py keeps the engine out).
import sys
from itertools import islice
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from assay.commands.fleet_common import (
    EXIT_INTERRUPTED,
    EXIT_UNAVAILABLE,
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
)
from assay.commands.options import (
    EngineFlags,
    FleetApiBaseOpt,
    FleetMaxCostOpt,
    FleetMaxIterationsOpt,
    FleetMaxTokensOpt,
    FleetModelOpt,
    FleetTimeoutOpt,
    ProbeOpt,
    UnattendedProfileOpt,
    check_probe_mode,
    check_profile,
    check_text,
    id_checker,
    settings_or_usage,
    spend_ceiling,
    validation_detail,
)
from schemas.exit_codes import EXIT_PENDING, EXIT_UNKNOWN, every_one_holds

if TYPE_CHECKING:
    from assay.api_models import BatchResults
    from assay.client import Client
    from schemas.fleet import BatchStatus

SUBCOMMANDS = ("status", "results")
Output = Literal["table", "json", "jsonl", "junit"]


def batch_exit_code(status: BatchStatus) -> int:
    """The code of "PREDICATE holds on every target": never 0 unless every one is true.

    A batch whose fan-out stopped part way (``incomplete``) left targets without a run,
    so it is 3 at best: nothing is known about those.
    """
    if not status.done:
        return EXIT_PENDING
    return every_one_holds(
        false=status.false,
        poorly_posed=status.poorly_posed,
        all_true=status.true == status.total and not status.incomplete,
    )


def wait_with_progress(client: Client, batch_id: str, timeout: float | None = None) -> BatchStatus:
    """Poll the tally under a rich progress bar (on stderr) until the batch is done."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[tally]}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=False,
    )
    task = progress.add_task(batch_id, total=None, tally="")

    def show(status: BatchStatus) -> None:
        tally = (
            f"true {status.true} · false {status.false} · poorly posed {status.poorly_posed} · "
            f"cannot determine {status.cannot_determine}"
        )
        progress.update(
            task, total=status.total, completed=status.total - status.pending, tally=tally
        )

    with progress:
        return client.wait_batch(batch_id, timeout=timeout, on_progress=show, poll=0.3)


def show_batch(client: Client, status: BatchStatus, json_output: bool, wide: bool = False) -> None:
    """The tally, then every target's verdict (paged reads, streamed to the table)."""
    from assay.fleet_render import render_batch_results, render_batch_status

    if json_output:
        print(dump_json(status))
        return
    console = stdout_console(wide)
    render_batch_results(client.batch_results(status.batch_id), console, wide=wide)
    render_batch_status(status, console)


def batch(
    args: Annotated[
        list[str],
        typer.Argument(
            metavar="PREDICATE | status [BATCH_ID] | results [BATCH_ID]",
            help="The predicate to fan out, or `status` / `results` of a batch (no id: the "
            "newest batch; any unique prefix of an id will do).",
        ),
    ],
    contexts: Annotated[
        str | None, typer.Option("--contexts", help="Glob over kubeconfig contexts, e.g. 'prod-*'.")
    ] = None,
    snapshots: Annotated[
        str | None,
        typer.Option(
            "--snapshots",
            help="Glob over snapshot folders, e.g. 'examples/snapshots/*', under the snapshot "
            "roots (env ASSAY_SNAPSHOT_ROOTS, default: the current directory).",
        ),
    ] = None,
    kubeconfig: KubeconfigOpt = None,
    wait: Annotated[bool, typer.Option("--wait", help="Show progress, then the table.")] = False,
    wait_timeout: Annotated[
        float | None,
        typer.Option(
            "--wait-timeout",
            min=1,
            help="With --wait: give up after this many seconds and exit 75 (default: no limit).",
        ),
    ] = None,
    json_output: Annotated[
        bool,
        typer.Option("--json", help="Print the status (or every result) as the API does."),
    ] = False,
    jsonl_output: Annotated[
        bool,
        typer.Option(
            "--jsonl",
            help="With `results`: one JSON line per target, streamed page by page (huge batches).",
        ),
    ] = False,
    output_format_: Annotated[
        str,
        typer.Option(
            "--format",
            help="table, json (as --json) or junit: JUnit XML with one test case per target "
            "(with --wait, or of `batch results`).",
        ),
    ] = "table",
    wide: WideOpt = False,
    model: FleetModelOpt = None,
    api_base: FleetApiBaseOpt = None,
    max_iterations: FleetMaxIterationsOpt = None,
    max_tokens: FleetMaxTokensOpt = None,
    timeout: FleetTimeoutOpt = None,
    max_cost: FleetMaxCostOpt = None,
    profile: UnattendedProfileOpt = None,
    probe: ProbeOpt = None,
    max_tokens_total: Annotated[
        str | None,
        typer.Option(
            "--max-tokens-total",
            help="Spend ceiling: tokens over all of the batch's runs; a run it stops ends "
            "cannot_determine (default: the fleet's, ASSAY_SPEND_BATCH_TOKENS).",
        ),
    ] = None,
    max_cost_total: Annotated[
        str | None,
        typer.Option(
            "--max-cost-total",
            help="Spend ceiling: US dollars over all of the batch's runs (models with a "
            "known price).",
        ),
    ] = None,
) -> None:
    """Fan PREDICATE out over many targets; or show a batch's status or results."""
    from workers.engine.snapshot_roots import SnapshotOutsideRoots

    if jsonl_output and (args[:1] != ["results"] or json_output):
        raise typer.BadParameter("--jsonl goes with `batch results` only, and not with --json")
    if output_format_ not in ("table", "json", "junit"):
        raise typer.BadParameter(
            f"must be table, json or junit, not {output_format_!r}", param_hint="--format"
        )
    json_output = json_output or output_format_ == "json"
    junit_output = output_format_ == "junit"
    if junit_output and (json_output or jsonl_output):
        raise typer.BadParameter("--format junit goes without --json and --jsonl")
    output: Output = "jsonl" if jsonl_output else ("json" if json_output else "table")
    if junit_output:
        output = "junit"
    if len(args) == 2 and args[0] in SUBCOMMANDS:
        batch_id = id_checker("batch id", lookup=True)(args[1])
        assert batch_id is not None
        raise typer.Exit(_existing(args[0], batch_id, output, wide))
    if len(args) == 1 and args[0] in SUBCOMMANDS and contexts is None and snapshots is None:
        raise typer.Exit(_existing(args[0], None, output, wide))
    if len(args) != 1:
        raise typer.BadParameter(
            "give one PREDICATE (quote it), or `status BATCH_ID`, or `results BATCH_ID`"
        )
    if (contexts is None) == (snapshots is None):
        raise typer.BadParameter("give exactly one of --contexts GLOB or --snapshots GLOB")
    if junit_output and not wait:
        raise typer.BadParameter(
            "--format junit needs --wait (or, later, `assay batch results BATCH_ID --format junit`)"
        )
    check_text(args[0])  # before any fleet lookup or note about waiting runs
    flags = EngineFlags(model, api_base, max_iterations, max_tokens, timeout, max_cost, profile)
    check_profile(flags.profile)
    check_probe_mode(probe)
    ceiling = spend_ceiling(
        max_tokens_total, max_cost_total, tokens_flag="--max-tokens-total",
        cost_flag="--max-cost-total",
    )  # fmt: skip
    settings = settings_or_usage()
    require_runnable(settings, flags.model, flags.api_base, args[0])
    from pydantic import ValidationError  # the fan-out's machinery: after the quick refusals

    from assay.submission import EmptyBatch, fanout_notes
    from workers.fleet.store import BatchClosed
    from workers.fleet.targets import TargetGlobError

    with fleet_client(settings) as client:
        try:
            batch_id = client.start_batch(
                args[0],
                snapshots=snapshots,
                contexts=contexts,
                kubeconfig=kubeconfig,
                profile=flags.profile,
                budget=flags.budget(),
                model=flags.model,
                api_base=flags.api_base,
                probe=probe,
                spend=ceiling,
            )
        except (EmptyBatch, TargetGlobError, SnapshotOutsideRoots) as exc:
            # a listing that failed after some targets went out says what became of them
            raise typer.BadParameter(_with_fanout_notes(str(exc), exc)) from None
        except ValidationError as exc:
            detail = f"the batch cannot be started: {validation_detail(exc)}"
            raise typer.BadParameter(_with_fanout_notes(detail, exc)) from None
        except BatchClosed as exc:
            fail(str(exc), EXIT_UNAVAILABLE)
        except KeyboardInterrupt as exc:
            fail(f"interrupted; {fanout_notes(exc) or 'no batch was started'}", EXIT_INTERRUPTED)
        status = client.batch_status(batch_id)
        if status is not None and status.not_before is not None:
            note(f"batch {batch_id} is deferred until {iso_utc(status.not_before)}")
        if not wait:
            if json_output:  # the shape POST /v1/batches answers with
                print(dump_json(status))
            else:
                print(batch_id)
            return
        from assay.client import WaitTimeout

        try:
            status = wait_with_progress(client, batch_id, wait_timeout)
        except WaitTimeout as exc:
            fail(f"{exc}; follow it with `assay batch status {batch_id}`", EXIT_PENDING)
        except KeyboardInterrupt:  # the batch goes on: say where to find it
            fail(
                f"stopped waiting; batch {batch_id} goes on in the fleet: follow it with "
                f"`assay batch status {batch_id}`",
                EXIT_INTERRUPTED,
            )
        if junit_output:
            print_junit(client, status)
        else:
            show_batch(client, status, json_output, wide)
    raise typer.Exit(batch_exit_code(status))


JUNIT_PAGE = 200  # rows whose verdicts are read together


def print_junit(client: Client, status: BatchStatus) -> None:
    """Every target's verdict as JUnit XML (assay/junit.py); a pending target is skipped."""
    from assay import junit

    cases = []
    rows = iter(client.batch_results(status.batch_id))
    while page := list(islice(rows, JUNIT_PAGE)):
        # Each page's kept verdicts in a few round trips; a row whose run's verdict is no
        # longer kept is told from the row (its verdict and explanation).
        verdicts = client.store.run_verdicts([r.run_id for r in page if r.verdict is not None])
        for row in page:
            cases.append(
                junit.Case(
                    row.check_id,
                    row.target,
                    status.text,
                    verdicts.get(row.run_id),
                    row_verdict=row.verdict,
                    row_explanation=row.explanation,
                )
            )
    sys.stdout.write(junit.render(cases, f"assay batch {status.batch_id}"))


def _with_fanout_notes(message: str, exc: BaseException) -> str:
    from assay.submission import fanout_notes

    stopped = fanout_notes(exc)
    return f"{message}; {stopped}" if stopped else message


def _existing(what: str, batch_id: str | None, output: Output, wide: bool = False) -> int:
    """`batch status|results [ID]`; returns the batch's exit code (75 while it runs).

    Without an id: the newest batch started through the CLI, the client or the API.
    ``output`` is ``table``, ``json`` (the API's shape) or ``jsonl`` (results only).
    """
    json_output = output in ("json", "jsonl")
    with fleet_client() as client:
        if batch_id is None:
            batch_id = client.latest_batch_id()
            if batch_id is None:
                fail(
                    "no batch has been started on this fleet yet; start one with `assay batch`",
                    EXIT_UNKNOWN,
                )
            if output == "table":
                print(f"latest batch: {batch_id}", file=sys.stderr)
        status = client.batch_status(batch_id)
        if status is None and (expanded := expand_id(client.store, batch_id, ("batch",))):
            batch_id = expanded[1]  # a unique prefix of one (assay.id_prefixes)
            status = client.batch_status(batch_id)
        if status is None:
            fail(f"no batch has id {batch_id!r}; check the id `assay batch` printed", EXIT_UNKNOWN)
        if output == "junit":
            print_junit(client, status)
        elif what == "status":
            _print_status(status, json_output)
        elif output == "jsonl":  # one line per target, streamed page by page
            for row in client.batch_results(batch_id):
                sys.stdout.write(row.model_dump_json() + "\n")
        elif output == "json":
            print(dump_json(all_results(client, batch_id)))
        else:
            show_batch(client, status, json_output=False, wide=wide)
    return batch_exit_code(status)


def all_results(client: Client, batch_id: str) -> BatchResults:
    """Every target's result in the API's ``BatchResults`` shape (one page holding them all)."""
    from assay.api_models import BatchResults

    return BatchResults(batch_id=batch_id, results=list(client.batch_results(batch_id)))


def _print_status(status: Any, json_output: bool) -> None:
    from rich.console import Console

    from assay.fleet_render import render_batch_status

    if json_output:
        print(dump_json(status))
    else:
        render_batch_status(status, Console(highlight=False, soft_wrap=True))


def register(app: typer.Typer) -> None:
    app.command("batch")(batch)
