"""Kubernetes' CEL libraries that the CEL runtime lacks, as plain Python functions.

One library per module, after the Kubernetes API server's own (``k8s.io/apiserver/pkg/cel/
library``: lists, regex, url, ip/cidr, quantity, semver, format) and cel-go's extensions it
enables (strings version 2, sets). None imports the CEL runtime: each lists its overloads as
:class:`Overload` (kinds by name), and the adapter (``workers/core/probes/cel.py``) declares
them. An implementation raises :class:`CelLibraryError` (or any ``ValueError``) for what
Kubernetes reports as an evaluation error; the runtime turns it into an error value, never
a result.

Kubernetes' opaque types (``Quantity``, ``IP``, ``CIDR``, ``URL``, ``Semver``, ``Format``)
travel as maps tagged with :data:`KIND_KEY` (the runtime's Python functions can return only
CEL values): their functions check the tag, and two equal values compare equal with ``==``
because each is stored in a canonical form.
"""

from __future__ import annotations

from workers.core.probes.cel_lib.base import (
    KIND_KEY,
    CelLibraryError,
    NoSuchOverload,
    Overload,
    opaque,
    unwrap,
)

__all__ = ["KIND_KEY", "CelLibraryError", "NoSuchOverload", "Overload", "all_overloads",
           "opaque", "unwrap"]  # fmt: skip


def all_overloads() -> list[Overload]:
    """Every library's overloads, in a stable order."""
    from workers.core.probes.cel_lib import (
        format as format_lib,
    )
    from workers.core.probes.cel_lib import (
        ip,
        lists,
        quantity,
        regex,
        semver,
        sets,
        strings,
        url,
    )

    out: list[Overload] = []
    for module in (strings, lists, sets, regex, url, ip, quantity, semver, format_lib):
        out.extend(module.OVERLOADS)
    return out
