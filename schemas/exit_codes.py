"""The exit-code contract that CI jobs and alerts gate on, without pydantic.

Its own module so the command line can name a code (``assay --help``, a usage error)
without building the verdict models; ``schemas.verdict`` exports the same names.
"""

from __future__ import annotations

from enum import StrEnum


class VerdictKind(StrEnum):
    TRUE = "true"
    FALSE = "false"
    POORLY_POSED = "poorly_posed"
    CANNOT_DETERMINE = "cannot_determine"


EXIT_CODES: dict[VerdictKind, int] = {
    VerdictKind.TRUE: 0,
    VerdictKind.FALSE: 1,
    VerdictKind.POORLY_POSED: 2,
    VerdictKind.CANNOT_DETERMINE: 3,
}
# Outside 0-3 on purpose: a script that only knows the verdict codes must never
# mistake "still running" or "no such id" for an answer.
EXIT_USAGE = 64  # the command line itself was wrong (sysexits EX_USAGE)
EXIT_UNKNOWN = 66  # no run or check with that id (sysexits EX_NOINPUT)
EXIT_EXPIRED = 67  # the run is known, but its report is no longer kept (docs/fleet.md)
EXIT_UNAVAILABLE = 69  # the fleet's Redis or broker is not reachable (sysexits EX_UNAVAILABLE)
# A bug (an exception nobody caught), or a part of a local fleet or the API that stopped on
# its own (sysexits EX_SOFTWARE): never Python's 1, which reads as a `false` verdict.
EXIT_INTERNAL = 70
EXIT_PENDING = 75  # the run exists but has no verdict yet (sysexits EX_TEMPFAIL)
EXIT_INTERRUPTED = 130  # Ctrl-C: what a shell reports for SIGINT (128 + 2)
# What a shell reports for a process killed by SIGPIPE (128 + 13): `assay ... | head -1`
# once head has gone. Not typer's 1, which a `set -o pipefail` job reads as `false`.
EXIT_BROKEN_PIPE = 141


def every_one_holds(*, false: int, poorly_posed: int, all_true: bool) -> int:
    """The code of "the predicate holds on every one" (a batch's targets, a report's checks):
    1 when one is false, else 2 when one is poorly posed, else 3 unless every one is known
    true (one undetermined, without a verdict, or never run), and 0 only then."""
    if false:
        return EXIT_CODES[VerdictKind.FALSE]
    if poorly_posed:
        return EXIT_CODES[VerdictKind.POORLY_POSED]
    if not all_true:
        return EXIT_CODES[VerdictKind.CANNOT_DETERMINE]
    return EXIT_CODES[VerdictKind.TRUE]


EXIT_MEANINGS: dict[int, str] = {
    0: "true",
    1: "false",
    2: "poorly posed",
    3: "cannot determine",
    EXIT_USAGE: "usage error",
    EXIT_UNKNOWN: "no such id",
    EXIT_EXPIRED: "the run's report is no longer kept",
    EXIT_UNAVAILABLE: "the fleet's Redis or broker is unreachable",
    EXIT_INTERNAL: "internal error (a bug, or a local fleet part that stopped)",
    EXIT_PENDING: "no verdict yet",
    EXIT_INTERRUPTED: "interrupted (Ctrl-C)",
    EXIT_BROKEN_PIPE: "output closed early (a pipe into head)",
}
"""Every code an `assay` command exits with, as `assay --help` lists them."""
