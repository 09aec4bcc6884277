"""Ids as people paste them: any unique prefix of a run, check or batch id, as git and docker
take a commit's or a container's.

Tables cut long ids to fit 80 columns (``chk-26b66cc1…``, a run ``9a3d059f…``); every
command that looks up a run, check or batch by id (`verdict`, `run`, `batch status`,
`batch results`, `probe show|test|export|drop`) takes such a cut id back, with or without
the ellipsis a copy from the terminal brings along. The command first looks the id up as
given, so a full id is always itself, even when it also begins a longer one; only an id
found nowhere is read as a prefix:

* one stored id of the kinds the command takes begins with it: that id;
* none: nothing found, and the command says so as for a full id (exit 66);
* several: :class:`AmbiguousId`, one sentence naming them (the first :data:`SHOWN`) and
  asking for more of the id; the commands exit 64 (the command line does not name one
  thing).

Which ids are searched: checks with a verdict (the ``P:checks`` index), batches (``P:batches``)
and runs whose record Redis still holds (``run_ttl``), ``VerdictStore.ids_starting_with``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Sequence

    from workers.fleet.store import VerdictStore

IdKind = Literal["run", "check", "batch"]
PASTED_ELLIPSES = ("…", "...")
SHOWN = 5


class AmbiguousId(ValueError):
    """Several stored ids begin with the prefix given; the message names them."""


def pasted(value: str) -> str:
    """``value`` without the ellipsis a table's cut id ends with, when it was copied along."""
    for ellipsis in PASTED_ELLIPSES:
        if value.endswith(ellipsis) and len(value) > len(ellipsis):
            return value[: -len(ellipsis)]
    return value


def expand(store: VerdictStore, prefix: str, kinds: Sequence[IdKind]) -> tuple[IdKind, str] | None:
    """The one stored id of ``kinds`` that begins with ``prefix`` (with its kind); None when
    none does; :class:`AmbiguousId` when several do."""
    matches = [
        (kind, found)
        for kind in kinds
        for found in store.ids_starting_with(kind, prefix, limit=SHOWN + 1)
    ]
    named = only_match(prefix, [f"{kind} {found}" for kind, found in matches])
    return None if named is None else matches[0]


def only_match(prefix: str, matches: Sequence[str]) -> str | None:
    """The one of ``matches`` (what begins with ``prefix``, up to :data:`SHOWN` + 1 of them);
    None when there is none; :class:`AmbiguousId`, naming them, when there are several."""
    if len(matches) > 1:
        more = " and more" if len(matches) > SHOWN else ""
        raise AmbiguousId(
            f"{prefix!r} begins several ids ({', '.join(matches[:SHOWN])}{more}): "
            "give more of the one you mean"
        )
    return matches[0] if matches else None
