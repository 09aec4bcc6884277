"""What the fleet commands share: options, the client with its errors, exit codes.

Exit codes outside the verdict's 0-3 (``schemas.exit_codes``, all listed by `assay --help`):
64 wrong command line, 66 no such id, 69 the fleet's Redis or broker cannot be reached,
70 internal error, 75 no verdict yet, 130 Ctrl-C, 141 output closed early.
"""

from __future__ import annotations

# Commands import the store, fleet, engine or API inside the function that needs them:
# `assay --help` loads in about 0.3 s and each of those adds 0.3-1 s more (measured with
# `python -X importtime -c 'import assay.cli'`; tests/assay/test_cli_check.py keeps the engine out).
import contextlib
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from assay.commands.options import ID_HELP, id_checker, settings_or_usage
from assay.terminal_text import print_line
from schemas.exit_codes import EXIT_INTERRUPTED as EXIT_INTERRUPTED  # the commands' names
from schemas.exit_codes import EXIT_PENDING, EXIT_UNAVAILABLE

if TYPE_CHECKING:
    from assay.client import Client
    from assay.id_prefixes import IdKind
    from schemas.settings import AssaySettings

ERROR_PREFIX = "assay: error: "

CheckIdOpt = Annotated[
    str | None,
    typer.Option(
        "--check-id",
        help=f"Group runs under this check id (default: from the text); {ID_HELP}.",
        callback=id_checker("check id"),
    ),
]
WideOpt = Annotated[
    bool,
    typer.Option(
        "--wide/--narrow",
        help="Full ids and every column, nothing cut (wider than 80 characters); default: "
        "one line per row within the terminal (80 columns piped), cut ids still taken back "
        "as prefixes.",
    ),
]
KubeconfigOpt = Annotated[
    str | None, typer.Option("--kubeconfig", help="kubeconfig file [env ASSAY_KUBECONFIG].")
]


def fail(message: str, code: int) -> NoReturn:
    """Print one sentence on stderr (``assay: error: ...``) and exit with ``code``.

    One line, whatever the sentence quotes (a file's key, a cluster's name): its controls
    and line breaks are spelled out (assay/terminal_text.py)."""
    print_line(f"{ERROR_PREFIX}{message}", sys.stderr)
    raise typer.Exit(code)


def iso_utc(moment: datetime) -> str:
    """An instant as the API writes it: ISO-8601 in UTC with a ``Z`` (pydantic's JSON form)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def dump_json(value: Any) -> str:
    """``value`` (contract models, lists, dicts) as JSON in the API's convention.

    The same serializer the API's responses go through (pydantic's JSON mode):
    the same field names and shapes, timestamps ISO-8601 UTC ending in ``Z``.
    """
    import pydantic_core

    return pydantic_core.to_json(value, indent=2).decode()


def note(message: str) -> None:
    """A remark on stderr that is not an error (stdout stays for results)."""
    print_line(f"assay: {message}", sys.stderr)


def still_pending(message: str) -> NoReturn:
    """Say on stderr what is still pending and exit 75: an answer to come, not an error."""
    note(message)
    raise typer.Exit(EXIT_PENDING)


def expand_id(store: Any, prefix: str, kinds: Sequence[IdKind]) -> tuple[IdKind, str] | None:
    """The one stored id of ``kinds`` a prefix stands for (``assay.id_prefixes``), None when
    none; several: exit 64 with one sentence naming them."""
    from assay.id_prefixes import AmbiguousId, expand
    from schemas.exit_codes import EXIT_USAGE

    try:
        return expand(store, prefix, kinds)
    except AmbiguousId as exc:
        fail(str(exc), EXIT_USAGE)


def require_reachable(url: str) -> None:
    """Exit 69 within about two seconds, with one sentence, when the fleet's Redis is away.

    The check itself lives with the Redis clients (``workers.fleet.redis_client``), where
    ``assay.Client`` and the API use it too; this only turns its answer into an exit.
    """
    from workers.fleet.redis_client import RedisUnreachable
    from workers.fleet.redis_client import require_reachable as check

    try:
        check(url)
    except RedisUnreachable as exc:
        fail(str(exc), EXIT_UNAVAILABLE)


NO_MODEL = (
    "no model is configured for the fleet: its {workers} worker(s) run without ASSAY_MODEL; "
    "restart them with ASSAY_MODEL set (the workers' setting wins), start the local fleet "
    "with `assay up --scripted FILE`, or pass --model"
)


def require_model(
    redis: Any,
    settings: AssaySettings,
    model: str | None,
    text: str | None = None,
    *,
    waiting_note: bool = True,
) -> None:
    """Refuse (64) a run no live worker could evaluate: no --model and no worker has one.

    With no live worker at all the run is queued and waits; a note says so (``waiting_note``).
    A predicate that names an imported policy (``policy:NAME``, ``policy-set:NAME``) needs
    no model: it must name a stored policy or set instead (66 otherwise).
    """
    from assay.worker_presence import read_fleet_models
    from schemas.exit_codes import EXIT_USAGE

    if text is not None and require_policy(redis, settings, text):
        return
    if model:
        return
    fleet = read_fleet_models(redis, settings.key_prefix)
    if fleet.models:
        return
    if fleet.workers:
        fail(NO_MODEL.format(workers=fleet.workers), EXIT_USAGE)
    if waiting_note:
        note(
            "no worker is running yet: the run waits in the queue until one starts "
            "(`assay up`, or `assay worker` with ASSAY_MODEL set)"
        )


def require_runnable(
    settings: AssaySettings, model: str | None, api_base: str | None, text: str | None
) -> None:
    """Refuse a run no live worker could evaluate before the fleet client is loaded.

    Why first: the client brings Celery and kombu, seconds of imports on a busy host,
    and a typo in --model or a key no worker holds is known from Redis alone (the
    workers' announcements), so the refusal comes as fast as `assay check`'s. One
    quick connection (69 within seconds when Redis is away); then :func:`require_model`
    and :func:`require_routable_model`.
    """
    from assay.local_mode import require_redis_url
    from workers.fleet.redis_client import FleetNotConfigured, RedisUnreachable, connect

    try:
        redis = connect(require_redis_url(settings), fail_fast=True)
    except (FleetNotConfigured, RedisUnreachable) as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    try:
        require_model(redis, settings, model, text)
        require_routable_model(redis, settings, model, api_base)
    finally:
        redis.close()


def require_policy(redis: Any, settings: AssaySettings, text: str) -> bool:
    """For a predicate naming an imported policy or set: exit 66 when it is not stored; True
    when it is (such a check is answered by its probes, never by a model). False for any
    other predicate."""
    from schemas.exit_codes import EXIT_UNKNOWN
    from schemas.policy import policy_reference
    from workers.fleet.policy_store import PolicyStore

    ref = policy_reference(text)
    if ref is None:
        return False
    store = PolicyStore.from_settings(settings, redis)
    found = store.get(ref.name) if ref.kind == "policy" else store.set_members(ref.name)
    if found is None:
        what = "imported policy" if ref.kind == "policy" else "policy set"
        fail(
            f"no {what} is named {ref.name!r}: import it first with `assay probe import FILE... "
            "--set NAME` (`assay probe policies` lists them)",
            EXIT_UNKNOWN,
        )
    return True


def require_routable_model(
    redis: Any, settings: AssaySettings, model: str | None, api_base: str | None = None
) -> None:
    """Refuse (64) a --model no worker could route, or whose provider no live worker holds
    a key for, before anything is queued or stored.

    The routing message is `assay check`'s (``workers.engine.llm.unroutable_model``); which
    endpoint the name is checked at, and the keys, are ``assay.model_check``'s to say.
    """
    from assay.model_check import fleet_model_problem

    problem = fleet_model_problem(model, api_base, redis=redis, settings=settings)
    if problem is not None:
        raise typer.BadParameter(problem, param_hint="--model")


@contextlib.contextmanager
def fleet_client(settings: AssaySettings | None = None) -> Iterator[Client]:
    """A Client for the configured fleet; connection trouble exits 69 with what to do.

    The client's first use of Redis checks quickly that it answers
    (``RedisUnreachable``), so a dead Redis is a 69 in about two seconds. A broker
    that fails while runs are queued (``RunsNotSent``) is a 69 too, and its message
    says what becomes of the runs.
    """
    import redis.exceptions

    from assay.client import Client
    from workers.engine.logs import configure_logging
    from workers.fleet.dispatch import RunsNotSent
    from workers.fleet.redis_client import FleetNotConfigured, RedisUnreachable

    settings = settings or settings_or_usage()
    configure_logging(settings)  # a warning (a publish batch retried) must not reach stdout
    try:
        client = Client(settings)
    except FleetNotConfigured as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    try:
        yield client
    except (RedisUnreachable, RunsNotSent) as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        fail(
            f"could not reach the fleet's Redis ({exc}); check it is running (`assay up`) "
            "or fix ASSAY_REDIS_URL",
            EXIT_UNAVAILABLE,
        )
    finally:
        with contextlib.suppress(Exception):
            client.close()


WIDE_COLUMNS = 10_000  # a --wide table is as wide as its cells, on a terminal or piped


def stdout_console(wide: bool = False) -> Any:
    """The console tables print to: the terminal's width (80 piped), or, with ``--wide``,
    as wide as the cells need, so no id, path or name is ever cut."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, width=WIDE_COLUMNS if wide else None)
