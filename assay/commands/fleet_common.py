"""What the fleet commands share: options, the client with its errors, exit codes.

Exit codes outside the verdict's 0-3: 64 wrong command line, 66 no such id,
69 the fleet's Redis or broker cannot be reached, 75 no verdict yet.
"""

from __future__ import annotations

# Commands import the store, fleet, engine or API inside the function that needs them:
# `assay --help` loads in about 0.3 s and each of those adds 0.3-1 s more (measured with
# `python -X importtime -c 'import assay.cli'`; tests/test_cli_check.py keeps the engine out).
import contextlib
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from assay.commands.options import ID_HELP, id_checker, settings_or_usage

if TYPE_CHECKING:
    from assay.client import Client
    from schemas.settings import AssaySettings

EXIT_UNAVAILABLE = 69  # sysexits EX_UNAVAILABLE: the fleet's Redis or broker is not reachable

CheckIdOpt = Annotated[
    str | None,
    typer.Option(
        "--check-id",
        help=f"Group runs under this check id (default: from the text); {ID_HELP}.",
        callback=id_checker("check id"),
    ),
]
KubeconfigOpt = Annotated[
    str | None, typer.Option("--kubeconfig", help="kubeconfig file [env ASSAY_KUBECONFIG].")
]


def fail(message: str, code: int) -> NoReturn:
    """Print one sentence on stderr and exit with ``code``."""
    print(f"assay: {message}", file=sys.stderr)
    raise typer.Exit(code)


@contextlib.contextmanager
def fleet_client(settings: AssaySettings | None = None) -> Iterator[Client]:
    """A Client for the configured fleet; connection trouble exits 69 with what to do."""
    import redis.exceptions

    from assay.client import Client
    from workers.fleet.broker import FleetNotConfigured

    try:
        client = Client(settings or settings_or_usage())
    except FleetNotConfigured as exc:
        fail(str(exc), EXIT_UNAVAILABLE)
    try:
        yield client
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
        fail(
            f"could not reach the fleet's Redis ({exc}); check it is running (`assay up`) "
            "or fix ASSAY_REDIS_URL",
            EXIT_UNAVAILABLE,
        )
    finally:
        with contextlib.suppress(Exception):
            client.close()


def stdout_console() -> Any:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True)
