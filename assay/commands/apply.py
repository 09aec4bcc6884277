"""`assay apply -f FILE|DIR|-` and `assay get checks|schedules`: checks and schedules as files.

`apply` makes the stored checks and schedules what the files declare (assay/apply.py
has the rules: ownership by source, prune, what a Check does when applied); `get`
writes them back in the same form, so `assay get schedules -o yaml > s.yaml` and
`assay apply -f s.yaml` change nothing. Exit codes: 0 applied (or nothing to apply),
64 a file or the command line is wrong (every problem printed, nothing applied),
69 the fleet's Redis or broker cannot be reached, 70 a write failed halfway (a race
with another writer; apply again).
"""

from __future__ import annotations

# Commands import the store, fleet, engine or API inside the function that needs them:
# `assay --help` loads in about 0.3 s and each of those adds 0.3-1 s more.
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from assay.commands.fleet_common import ERROR_PREFIX, WideOpt, dump_json, fail, fleet_client
from assay.terminal_text import print_block, print_line
from schemas.exit_codes import EXIT_USAGE

if TYPE_CHECKING:
    from assay.apply import ApplyContext
    from assay.client import Client

EXIT_WRITE_FAILED = 70
# A pipe whose first command failed (`kustomize build ... | assay apply -f - --prune`) gives an
# empty standard input: no declaration that every object of the source should be deleted.
# A file, or input holding only a comment, still prunes all (that is written on purpose).
EMPTY_STDIN = (
    "standard input is empty, and with --prune that would delete every object of source "
    "{source!r}: nothing applied (did the command before the pipe fail? to remove them all, "
    "apply a file holding only a comment)"
)

FileOpt = Annotated[
    list[str],
    typer.Option(
        "-f",
        "--filename",
        metavar="PATH",
        help="A YAML file, a folder of them (sub-folders included) or - for standard input; "
        "repeatable.",
    ),
]
SourceOpt = Annotated[
    str | None,
    typer.Option(
        "--source",
        help="Name of this set of files, kept as label assay.dev/source on what it creates; "
        "--prune removes only objects of this source (and needs it). Default: the one -f path.",
    ),
]


def apply_command(
    filename: FileOpt,
    source: SourceOpt = None,
    prune: Annotated[
        bool,
        typer.Option(
            "--prune",
            help="Delete checks and schedules an earlier apply of this source created and the "
            "files no longer hold (nothing else).",
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print what would change, as a diff; apply nothing.")
    ] = False,
    json_out: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Create, change or prune checks and schedules so they match the files (docs/apply.md)."""
    from assay.apply import ApplyFailed, SourceError, apply, default_source, source_name
    from assay.manifests import ManifestErrors, load, read_sources

    if prune and source is None:
        fail(
            "--prune needs --source NAME: it deletes the objects of that source the files no "
            "longer hold, and a source taken from the path (-f - is always 'stdin') may be "
            "another team's",
            EXIT_USAGE,
        )
    try:
        chosen = source_name(source) if source is not None else default_source(filename)
        stdin = sys.stdin.read() if "-" in filename else None
        if prune and stdin is not None and not stdin.strip():
            fail(EMPTY_STDIN.format(source=chosen), EXIT_USAGE)
        loaded = load(read_sources(filename, stdin))
    except SourceError as exc:
        fail(str(exc), EXIT_USAGE)
    except ManifestErrors as exc:
        _refuse(exc)
    with fleet_client() as client:
        context = cli_context(client)
        try:
            result = apply(loaded, context, source=chosen, prune=prune, dry_run=dry_run)
        except ManifestErrors as exc:
            _refuse(exc)
        except ApplyFailed as exc:
            fail(str(exc), EXIT_WRITE_FAILED)
    if json_out:
        print(dump_json(result.as_json()))
        return
    for change in result.changes:
        print_line(
            change.describe() + (" (dry run)" if dry_run and change.action != "unchanged" else "")
        )
        if dry_run and change.diff:
            print_block(change.diff)
    print_line(result.summary())


def _refuse(exc: Any) -> None:
    for problem in exc.problems:
        print_line(f"{ERROR_PREFIX}{problem}", sys.stderr)
    count = len(exc.problems)
    print(
        f"{ERROR_PREFIX}nothing applied: fix the {count} problem{'s' if count != 1 else ''} "
        "above and apply again",
        file=sys.stderr,
    )
    raise typer.Exit(EXIT_USAGE)


def cli_context(client: Client) -> ApplyContext:
    """What applying needs, from the CLI's side: the local snapshot roots, its Redis."""
    from assay.apply import ApplyContext, fleet_model_refusal
    from assay.submission import submit_requests
    from scheduler.schedules import ScheduleStore
    from workers.engine.snapshot_roots import SnapshotRoots
    from workers.fleet.check_definitions import CheckDefinitionStore
    from workers.fleet.policy_store import PolicyStore
    from workers.fleet.targets import snapshot_targets

    settings = client.settings
    redis = client.store.client
    roots = SnapshotRoots.for_local(settings)

    def confine(pattern: str) -> str:
        confined = roots.confine_pattern(pattern)
        if next(iter(snapshot_targets(confined, roots)), None) is None:
            raise ValueError(f"{pattern!r} matches no snapshot folder; check the path or glob")
        return confined

    return ApplyContext(
        settings=settings,
        schedules=ScheduleStore(redis, settings.key_prefix, settings.min_interval_seconds),
        checks=CheckDefinitionStore(redis, settings.key_prefix),
        confine_snapshot=confine,
        model_problem=lambda model: fleet_model_refusal(model, redis=redis, settings=settings),
        submit=lambda requests: submit_requests(
            requests,
            store=client.store,
            redis=redis,
            settings=settings,
            dispatcher=lambda: client.dispatcher,
        ),
        policies=PolicyStore.from_settings(settings, redis),
    )


get_app = typer.Typer(
    rich_markup_mode=None,
    name="get",
    help="Write stored checks or schedules as the documents `assay apply` reads.",
    no_args_is_help=True,
)

OutputOpt = Annotated[
    str,
    typer.Option("-o", "--output", help="yaml (what apply reads), json, or table (one line each)."),
]
NamesArg = Annotated[list[str] | None, typer.Argument(help="Only these names.")]
GetSourceOpt = Annotated[
    str | None, typer.Option("--source", help="Only objects created from this source.")
]
BaseOpt = Annotated[
    Path | None,
    typer.Option(
        "--base",
        metavar="DIR",
        help="Write snapshot paths relative to DIR: the folder the output file will be kept "
        "in, since apply reads paths from a document's folder. Default: the current directory.",
        file_okay=False,
    ),
]


@get_app.command("checks")
def get_checks(
    names: NamesArg = None,
    output: OutputOpt = "table",
    source: GetSourceOpt = None,
    base: BaseOpt = None,
    wide: WideOpt = False,
) -> None:
    """Declared checks (made by `assay apply`)."""
    _get("checks", names or [], output, source, base or Path.cwd(), wide)


@get_app.command("schedules")
def get_schedules(
    names: NamesArg = None,
    output: OutputOpt = "table",
    source: GetSourceOpt = None,
    base: BaseOpt = None,
    wide: WideOpt = False,
) -> None:
    """Schedules, whether made by `assay apply`, `assay schedule add` or the API."""
    _get("schedules", names or [], output, source, base or Path.cwd(), wide)


def _get(
    kind: str, names: list[str], output: str, source: str | None, base: Path, wide: bool
) -> None:
    from assay.apply import as_yaml, portable, stored_documents
    from scheduler.schedules import ScheduleStore
    from workers.fleet.check_definitions import CheckDefinitionStore

    if output not in ("yaml", "json", "table"):
        fail(f"-o must be yaml, json or table, not {output!r}", EXIT_USAGE)
    with fleet_client() as client:
        settings, redis = client.settings, client.store.client
        if kind == "schedules":
            store = ScheduleStore(redis, settings.key_prefix, settings.min_interval_seconds)
            documents = stored_documents(store, None, source=source, names=names)
        else:
            documents = stored_documents(
                None, CheckDefinitionStore(redis, settings.key_prefix), source=source, names=names
            )
    missing = sorted(set(names) - {d["metadata"]["name"] for d in documents})
    if missing:
        fail(f"no {kind[:-1]} named {', '.join(missing)}", 66)
    documents = [portable(document, base) for document in documents]
    if output == "yaml":
        if documents:
            print_block(as_yaml(documents))
        return
    if output == "json":
        print(dump_json(documents))
        return
    _table(kind, documents, wide)


def _table(kind: str, documents: list[dict[str, Any]], wide: bool) -> None:
    from assay.apply import evaluated
    from assay.commands.fleet_common import stdout_console
    from assay.render import Col, add_line, line_table, safe_markup
    from schemas.declarative import SOURCE_LABEL

    if not documents:
        print(f"no {kind} yet; declare some in a file and `assay apply -f FILE`")
        return
    console = stdout_console(wide)
    table = line_table(  # one line per object, as the fleet's other tables
        console, Col("name", "gives"), Col("source", "gives"), Col("when", "gives"),
        Col("targets", "gives"), Col("predicate", "main", least=20), wide=wide,
    )  # fmt: skip
    for document in documents:
        spec = document["spec"]
        labels = document["metadata"].get("labels") or {}
        targets = spec["targets"]
        where = ", ".join(
            targets.get("contexts") or targets.get("snapshots") or [targets.get("contextGlob", "")]
        )
        if kind == "schedules":
            when = f"cron {spec['cron']}" if "cron" in spec else f"every {spec['every']}"
            when += " (paused)" if spec.get("paused") else ""
        else:
            when = "on apply"
        cells = [
            document["metadata"]["name"],
            labels.get(SOURCE_LABEL, "-"),
            when,
            where,
            evaluated(spec),
        ]
        add_line(table, *(safe_markup(str(cell)) for cell in cells))
    console.print(table, soft_wrap=False)


def register(app: typer.Typer) -> None:
    app.command("apply")(apply_command)
    app.add_typer(get_app, name="get")
