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
EXIT_PENDING = 75  # the run exists but has no verdict yet (sysexits EX_TEMPFAIL)
