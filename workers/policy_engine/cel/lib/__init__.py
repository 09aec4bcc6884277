"""Kubernetes' CEL libraries that the CEL runtime lacks, as plain Python functions.

One library per module, after the Kubernetes API server's own (``k8s.io/apiserver/pkg/cel/
library``: lists, regex, url, ip/cidr, quantity, semver, format), plus what the runtime's
two-variable comprehensions need (comprehensions). Where the runtime has a library of its
own that behaves as Kubernetes' does (cel-go's strings, sets, optional types, two-variable
comprehensions), the adapter loads that one instead (cel/environment.py says which). None imports
the CEL runtime: each lists its overloads as :class:`Overload` (kinds by name) and, where a
call must be rewritten before compiling, its :class:`CallRewrite` rewrites (on the syntax
tree); the adapter
(``workers/policy_engine/cel/programs.py``) declares them. An implementation raises
:class:`CelLibraryError` (or any ``ValueError``) for what Kubernetes reports as an
evaluation error; the runtime turns it into an error value, never a result.

Kubernetes' library values (``Quantity``, ``IP``, ``CIDR``, ``URL``, ``Semver``, ``Format``)
have the API server's types (values.py): a map is never taken for one, and two equal values
compare equal with ``==`` because each is stored in a canonical form.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module

from workers.policy_engine.cel.lib.base import (
    CelLibraryError,
    NoSuchOverload,
    Overload,
    opaque,
    unwrap,
)
from workers.policy_engine.cel.lib.rewrite import CallRewrite, rewrite_calls

__all__ = ["CallRewrite", "CelLibraryError", "NoSuchOverload", "Overload", "opaque",
           "overloads", "rewrite_calls", "rewrites", "unwrap"]  # fmt: skip


def overloads(modules: Sequence[str]) -> list[Overload]:
    """The overloads of the named library modules, in order."""
    out: list[Overload] = []
    for name in modules:
        out.extend(import_module(f"{__name__}.{name}").OVERLOADS)
    return out


def rewrites(modules: Sequence[str]) -> list[CallRewrite]:
    """The call rewrites of the named library modules (most have none)."""
    out: list[CallRewrite] = []
    for name in modules:
        out.extend(getattr(import_module(f"{__name__}.{name}"), "REWRITES", []))
    return out
